"""The layering rules. The floors of `FLOORS`, lowest first: a module imports its own
package and the floors below it, never a floor above it nor a neighbour on its own
floor (wire and supervision know nothing of each other), so the store never depends on
how a recording is written, and the composer (`tracewatch.core.engine`) can change without
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
    ("tracewatch.core.errors", "tracewatch.core.text"),  # what every floor says: the error base, a value's short text
    ("tracewatch.core.paths", "tracewatch.core.ports"),  # where state lives; free loopback ports
    ("tracewatch.core.wire", "tracewatch.core.supervision"),  # the env-server protocol; a supervised child process
    ("tracewatch.core.run", "tracewatch.core.tokens"),  # read off the wire's traces: a run's timing and series; a message's tokens
    ("tracewatch.core.session",),  # configs, the store, variants, the shapes every session fills
    ("tracewatch.core.recordings",),  # recordings on disk: format, writer, reader, index, export
    ("tracewatch.core.taps",),  # rollouts other programs drive: proxy, eval tap, relay viewer
    ("tracewatch.core.demo",),  # the built-in demo env server and its config
    ("tracewatch.core.engine",),  # the composer: every kind of session, the headless runner
    ("tracewatch.tui.drawing",),  # how every view draws: literal text, numbers, the theme's colours
    ("tracewatch.tui.chrome",),  # the keys, the footer, the modal screens
    ("tracewatch.tui.table", "tracewatch.tui.trace", "tracewatch.tui.tokens"),  # the table; a trace; a message's tokens
    ("tracewatch.tui.run_views",),  # the run as a whole: cards, timing, timeline, trends, compare, logs
    ("tracewatch.tui.app",),  # the app, which composes the rooms
    ("tracewatch.on_screen",),  # the app run on the terminal until it or a signal ends it
    ("tracewatch.tokens_command",),  # the command line, the composition root: `tracewatch tokens`,
    ("tracewatch.cli",),  # every other form,
    ("tracewatch.launch",),  # the entry point,
    ("tracewatch.__main__",),  # and `python -m tracewatch`
)

PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


def _sources(package: str) -> list[tuple[Path, str]]:
    """Each module of `package` (a folder at the root: `core`, `tui`, or `tracewatch`'s own
    modules) and the name it is imported by: everything installs under `tracewatch`."""
    if package == "tracewatch":
        paths = sorted(path for path in (ROOT / "tracewatch").glob("*.py"))
    else:
        paths = sorted((ROOT / package).rglob("*.py"))
    found = []
    for path in paths:
        parts = path.relative_to(ROOT).with_suffix("").parts
        dotted = ".".join(parts).removesuffix(".__init__")
        found.append((path, dotted if package == "tracewatch" else f"tracewatch.{dotted}"))
    return found


PACKAGES = ("core", "tui", "tracewatch")


def _modules(package: str) -> list[str]:
    return sorted({module for path, module in _sources(package) if path.name != "__main__.py"})


@pytest.mark.slow
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


def test_every_module_sits_on_a_floor() -> None:
    roots = {"tracewatch", "tracewatch.core", "tracewatch.tui"}
    unplaced = [module for package in PACKAGES for _, module in _sources(package) if module not in roots and _unit(module) is None]
    assert not unplaced, f"add these to FLOORS: {', '.join(unplaced)}"


def test_no_import_runs_up_or_sideways() -> None:
    wrong = []
    for path, module in [source for package in PACKAGES for source in _sources(package)]:
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
        "from tracewatch.core.session.store import RolloutStore\n"
        "def f():\n    from tracewatch.core.engine.live import LiveSession\n"
        "from ..recordings import reader\n"
        "from tracewatch.core import taps\n"
    )
    imported = _imports(tmp_path / "late.py", "tracewatch.core.session.late")
    assert imported == {"tracewatch.core.session.store", "tracewatch.core.engine.live", "tracewatch.core.recordings", "tracewatch.core.taps"}
    assert {_unit(name)[1] for name in imported if _unit(name)} == {"tracewatch.core.session", "tracewatch.core.recordings", "tracewatch.core.taps", "tracewatch.core.engine"}


def test_every_package_is_checked() -> None:
    assert {"tracewatch.core.wire", "tracewatch.core.session", "tracewatch.core.recordings", "tracewatch.tui.table", "tracewatch.cli"} <= set(
        module for package in PACKAGES for module in _modules(package)
    )


@pytest.mark.parametrize("folder", ["core", "tui", "tracewatch", "tracewatch_guest", "tests", "bench", "screenshots"])
def test_nothing_imports_the_code_by_its_folder_name(folder: str) -> None:
    """`core` and `tui` are folders, not packages: imported as such they would load a second
    copy of every module beside `tracewatch.core`'s (and, installed, find a user's own)."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")) if folder != "tracewatch" else sorted((ROOT / folder).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            found += [f"{path.relative_to(ROOT)}: {name}" for name in names if name.split(".")[0] in ("core", "tui")]
    assert not found, "import these as tracewatch.core / tracewatch.tui:\n" + "\n".join(found)

