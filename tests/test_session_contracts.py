"""The shapes the screen reads a session through (`tracewatch.core.session.contracts`):
the module is light enough for the screen to import before any session exists, and
the screen reads the store only through its read-only view, so mypy refuses a write
from the screen."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pydantic", "zmq", "msgpack", "numpy", "textual", "rich")

PROBE = """
import json, sys
before = set(sys.modules)
import tracewatch.core.session.contracts
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_the_contracts_import_nothing_heavy_and_no_other_part() -> None:
    """Its docstring says it imports nothing heavy; it loaded pydantic and ~180 modules
    through the store it named."""
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    heavy = sorted({name.split(".")[0] for name in loaded} & set(HEAVY))
    ours = [name for name in loaded if name.startswith("tracewatch")]
    assert heavy == [], f"contracts loads {', '.join(heavy)}"
    assert set(ours) <= {"tracewatch", "tracewatch.core", "tracewatch.core.session", "tracewatch.core.session.contracts"}, ours


def test_the_screen_reads_the_store_through_its_view() -> None:
    """A session hands the screen a `StoreView`, and no screen module names the store
    itself: a call to a mutator from the screen is a type error."""
    contracts = ast.parse((ROOT / "core" / "session" / "contracts.py").read_text())
    session = next(node for node in contracts.body if isinstance(node, ast.ClassDef) and node.name == "SessionView")
    store = next(node for node in session.body if isinstance(node, ast.FunctionDef) and node.name == "store")
    assert store.returns is not None and ast.unparse(store.returns) == "StoreView"
    naming = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((ROOT / "tui").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.Name) and node.id == "RolloutStore") or (isinstance(node, ast.alias) and node.name == "RolloutStore")
    ]
    assert naming == [], "type the screen against StoreView"
