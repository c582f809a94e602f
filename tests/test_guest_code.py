"""The guest code (`tracewatch_guest`, and `tracewatch_relay` that users import) runs in
someone else's interpreter: it imports only the standard library and what its host is
known to have, never `tracewatch` (nor anything named `core` or `tui`), textual or
pydantic, even through another module; the injected tap loads the framing where
tracewatch is not installed, without putting `tracewatch` on the host's path; and the
framing reads any frames."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracewatch_guest.framing import Message, decode, encode

ROOT = Path(__file__).resolve().parent.parent
GUEST = ROOT / "tracewatch_guest"
NEVER = {"tracewatch", "core", "tui", "textual", "pydantic"}

ALLOWED = {
    "__init__.py": set(),
    "framing.py": set(),
    # verifiers only where it wraps verifiers' own client, in the host that has it
    "relay.py": {"zmq", "msgpack", "verifiers", "tracewatch_guest"},
    "inject/__init__.py": set(),
    "inject/sitecustomize.py": {"zmq", "msgpack", "verifiers", "tracewatch_guest"},
    # pydantic only where verifiers, which depends on it, has already been imported
    "serve_verifiers.py": {"zmq", "verifiers", "pydantic"},
}
"""Per guest file, what it may import beyond the standard library."""

PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


def _imported(path: Path) -> tuple[set[str], set[str]]:
    """The top-level names a file imports: all of them, and those imported when the
    module loads (not inside a function)."""
    tree = ast.parse(path.read_text(), str(path))
    nested = {id(node) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) for node in ast.walk(fn)}
    every: set[str] = set()
    at_load: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = {node.module.split(".")[0]}
        else:
            continue
        every |= names
        if id(node) not in nested:
            at_load |= names
    return every, at_load


def test_every_guest_file_has_its_imports_decided() -> None:
    assert {p.relative_to(GUEST).as_posix() for p in GUEST.rglob("*.py")} == set(ALLOWED)


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_a_guest_file_imports_only_the_standard_library_and_what_its_host_has(name: str) -> None:
    every, at_load = _imported(GUEST / name)
    assert every - set(sys.stdlib_module_names) <= ALLOWED[name]
    assert not at_load & NEVER, "pydantic, if at all, only inside a function run where verifiers is"


def test_the_users_relay_module_only_re_exports_the_guest_relay() -> None:
    every, _ = _imported(ROOT / "tracewatch_relay.py")
    assert every <= {"tracewatch_guest", "__future__"}


def _guest_modules() -> list[str]:
    names = ["tracewatch_relay"]
    for path in sorted(GUEST.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] != "sitecustomize":  # a top-level module where it runs: see the tests below
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.slow
@pytest.mark.parametrize("module", _guest_modules())
def test_importing_guest_code_loads_nothing_of_tracewatch_nor_textual_nor_pydantic(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, module], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert not loaded & NEVER, f"{module} loads {', '.join(sorted(loaded & NEVER))}"


INSIDE_THE_HOST = """
import importlib.util, json, sys
import sitecustomize
framing = sys.modules.get("tracewatch_guest.framing")
print(json.dumps({
    "framing": framing.__file__ if framing else None,
    "tapping": any(type(finder).__name__ == "_Finder" for finder in sys.meta_path),
    "found": {name: getattr(importlib.util.find_spec(name), "origin", None) for name in ("core", "tracewatch")},
    "loaded": sorted({name.split(".")[0] for name in sys.modules} & {"tracewatch", "core", "tui", "textual", "pydantic"}),
}))
"""


@pytest.mark.slow
def test_the_injected_tap_loads_the_framing_in_an_interpreter_without_tracewatch(tmp_path: Path) -> None:
    """`-S`: no site-packages, so neither tracewatch nor its editable finder, like
    another project's venv; that project has a `core` of its own."""
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("raise RuntimeError('the tap imported the project\\'s own core')\n")
    env = {**os.environ, "PYTHONPATH": str(GUEST / "inject"), "TRACEWATCH_TAP": "tcp://127.0.0.1:9"}
    done = subprocess.run(
        [sys.executable, "-S", "-c", INSIDE_THE_HOST], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    seen = json.loads(done.stdout)
    assert seen["framing"] == str(GUEST / "framing.py") and seen["tapping"]
    assert seen["found"] == {"core": str(tmp_path / "core" / "__init__.py"), "tracewatch": None}  # not on the path
    assert seen["loaded"] == []


@given(st.lists(st.binary(max_size=8), max_size=6))
def test_any_frames_decode_to_a_message_or_none(frames: list[bytes]) -> None:
    message = decode(frames)
    assert (message is None) == (len(frames) != 4)
    if message is not None:
        assert list(message[:3]) == frames[:3]


@given(st.binary(max_size=8), st.binary(max_size=8), st.binary(max_size=64), st.integers(min_value=0, max_value=2**63))
def test_an_encoded_message_decodes_to_itself(kind: bytes, run: bytes, payload: bytes, dropped: int) -> None:
    assert decode(encode(kind, run, payload, dropped)) == Message(kind, run, payload, dropped)
