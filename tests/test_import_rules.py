"""The layering rules. The floors of `FLOORS`, lowest first: a module imports its own
package and the floors below it, never a floor above it nor a neighbour on its own
floor (wire and supervision know nothing of each other), so the store never depends on
how a recording is written, and the composer (`core.engine`) can change without
anything below it noticing. Read from the source (every import, even one inside a
function), so an import that runs only at a command's start counts too.

`core` runs without a screen: each of its modules is imported alone in a fresh
interpreter and must not load textual or rich, even through another module. `tui`
reaches sockets and processes only through core: its own source never imports zmq,
subprocess or signal, nor calls `os.kill` (checked in the source, since asyncio
itself loads subprocess and the CLI rightly loads core's client)."""

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

FLOORS: tuple[tuple[str, ...], ...] = (
    ("tracewatch_guest",),  # runs in someone else's interpreter; tests/test_guest_code.py keeps it apart
    ("core.errors", "core.text"),  # what every floor says: the error base, a value's short text
    ("core.paths", "core.ports"),  # where state lives; free loopback ports
    ("core.wire", "core.supervision"),  # the env-server protocol; a supervised child process
    ("core.run", "core.tokens"),  # read off the wire's traces: a run's timing and series; a message's tokens
    ("core.session",),  # configs, the store, variants, the shapes every session fills
    ("core.recordings",),  # recordings on disk: format, writer, reader, index, export
    ("core.taps",),  # rollouts other programs drive: proxy, eval tap, relay viewer
    ("core.demo",),  # the built-in demo env server and its config
    ("core.engine",),  # the composer: every kind of session, the headless runner
    ("tui",),  # the screen
)

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


def _unit(module: str) -> tuple[int, str] | None:
    """The floor and the package (or base module) that `module` belongs to."""
    for floor, units in enumerate(FLOORS):
        for unit in units:
            if module == unit or module.startswith(unit + "."):
                return floor, unit
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Every module of ours that `path` imports, wherever the import statement sits."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            name = ".".join(part for part in (base, node.module or "") if part)
            # `from core import engine` names its package in the alias, not the module
            found |= {name} if _unit(name) else {f"{name}.{alias.name}" for alias in node.names}
    return {name for name in found if _unit(name) is not None}


def _sources(package: str) -> list[tuple[Path, str]]:
    return [
        (path, ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
        for path in sorted((ROOT / package).rglob("*.py"))
    ]


def test_every_core_module_sits_on_a_floor() -> None:
    unplaced = [module for _, module in _sources("core") if module != "core" and _unit(module) is None]
    assert not unplaced, f"add these to FLOORS: {', '.join(unplaced)}"


def test_no_import_runs_up_or_sideways() -> None:
    wrong = []
    for path, module in _sources("core"):
        placed = _unit(module)
        for imported in sorted(_imports(path, module)):
            target = _unit(imported)
            if placed is None or target is None or target[1] == placed[1]:
                continue
            elif target[0] > placed[0]:
                wrong.append(f"{module} imports {imported}, a floor above it ({target[1]} over {placed[1]})")
            elif target[0] == placed[0]:
                wrong.append(f"{module} imports {imported}, a neighbour on its own floor")
    assert not wrong, "\n".join(wrong)


def test_the_floor_rule_catches_an_import_up(tmp_path: Path) -> None:
    """The check reads what it must: an upward import, a lazy one, a relative one."""
    (tmp_path / "late.py").write_text(
        "from core.session.store import RolloutStore\n"
        "def f():\n    from core.engine.live import Engine\n"
        "from ..recordings import reader\n"
        "from core import taps\n"
    )
    imported = _imports(tmp_path / "late.py", "core.session.late")
    assert imported == {"core.session.store", "core.engine.live", "core.recordings", "core.taps"}
    assert {_unit(name)[1] for name in imported if _unit(name)} == {"core.session", "core.recordings", "core.taps", "core.engine"}


def test_every_package_is_checked() -> None:
    assert {"core.wire", "core.session", "core.supervision", "core.recordings", "tui"} <= set(
        _modules("core") + _modules("tui")
    )
