"""The layering rule. `core` runs without a screen: each of its modules is imported
alone in a fresh interpreter and must not load textual or rich, even through another
module. `tui` reaches sockets and processes only through core: its own source never
imports zmq, subprocess or signal, nor calls `os.kill` (checked in the source, since
asyncio itself loads subprocess and the CLI rightly loads core's client)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEVER_LOADED_BY_CORE = ("textual", "rich")
NEVER_IMPORTED_BY_TUI = ("subprocess", "zmq", "signal")

PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


def _modules(package: str) -> list[str]:
    names = [package]
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(set(names))


@pytest.mark.parametrize("module", _modules("core"))
def test_core_module_never_loads_the_screen(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    leaked = {name.split(".")[0] for name in json.loads(done.stdout)} & set(NEVER_LOADED_BY_CORE)
    assert not leaked, f"{module} pulls in {', '.join(sorted(leaked))}"


@pytest.mark.parametrize("path", sorted((ROOT / "tui").rglob("*.py")), ids=lambda p: p.name)
def test_tui_source_never_touches_processes_or_sockets(path: Path) -> None:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] in NEVER_IMPORTED_BY_TUI]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in NEVER_IMPORTED_BY_TUI:
            found.append(node.module or "")
        elif isinstance(node, ast.Attribute) and node.attr in ("kill", "killpg") and getattr(node.value, "id", "") == "os":
            found.append(f"os.{node.attr}")
    assert not found, f"{path.relative_to(ROOT)} uses {', '.join(found)}: go through core instead"


def test_every_package_is_checked() -> None:
    assert {"core.wire", "core.session", "core.supervision", "core.recordings", "tui"} <= set(
        _modules("core") + _modules("tui")
    )
