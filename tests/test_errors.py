"""One base for every error core raises: the CLI catches `TracewatchError` and prints
its message, so an error class outside it would reach the user as a traceback."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from tracewatch.core.errors import TracewatchError

ROOT = Path(__file__).resolve().parent.parent
TRACEWATCH = Path(sys.executable).with_name("tracewatch")


def _core_modules() -> list[str]:
    names = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if parts[-1] != "__main__":
            names.append(f"tracewatch.{name}")
    return names


def _error_classes(module_name: str) -> list[type[BaseException]]:
    module = importlib.import_module(module_name)
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module_name
    ]


def test_every_error_class_in_core_is_a_tracewatch_error() -> None:
    found = {cls: name for name in _core_modules() for cls in _error_classes(name)}
    assert {"ConfigError", "AssemblyError", "RunFailed"} <= {cls.__name__ for cls in found}, "the walk missed core's errors"
    outside = sorted(f"{name}.{cls.__qualname__}" for cls, name in found.items() if not issubclass(cls, TracewatchError))
    assert not outside, f"not TracewatchError subclasses: {', '.join(outside)}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["replay", "{tmp}/notes.twrec"], "is not a tracewatch recording"),
        (["open", "{tmp}"], "has no traces.jsonl"),
        (["attach", "tcp://127.0.0.1:9", "--tasks", "{tmp}/missing.jsonl", "--headless"], "does not exist"),
    ],
    ids=["replay-not-a-recording", "open-not-a-run", "attach-no-tasks"],
)
def test_a_bad_input_reaches_the_user_as_one_line_and_a_failing_exit(tmp_path: Path, argv: list[str], expected: str) -> None:
    (tmp_path / "notes.twrec").write_text("not a recording\n")
    done = subprocess.run(
        [str(TRACEWATCH), *(arg.format(tmp=tmp_path) for arg in argv)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert done.returncode != 0
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("tracewatch: ") and expected in line
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["attach", "http://127.0.0.1:8000", "--tasks", "{tmp}/tasks.jsonl", "--headless"], "tracewatch: attach: argument ADDRESS: expected tcp://host:port"),
        (["attach", "tcp://127.0.0.1:9", "--tasks", "{tmp}/tasks.jsonl", "--rollouts", "0", "--headless"], "tracewatch: attach: argument --rollouts: expected at least 1, got 0"),
        (["tap", "http://127.0.0.1:8000", "--headless"], "tracewatch: tap: argument ADDRESS: expected tcp://"),
        (["proxy", "--listen", "tcp://127.0.0.1:5000", "--upstream", "localhost:5001", "--headless"], "tracewatch: proxy: argument --upstream: expected tcp://"),
    ],
    ids=["attach-http", "attach-rollouts", "tap-http", "proxy-upstream"],
)
def test_a_command_line_mistake_is_said_in_command_line_words(tmp_path: Path, argv: list[str], expected: str) -> None:
    """The argument as argparse names it (not a config file's field path), what it
    expects and what it was given."""
    (tmp_path / "tasks.jsonl").write_text('{"name": "t"}\n')
    done = subprocess.run(
        [str(TRACEWATCH), *(arg.format(tmp=tmp_path) for arg in argv)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert done.returncode != 0
    (line,) = done.stderr.splitlines()
    assert expected in line and "variants[0]" not in line
    assert "got " in line
