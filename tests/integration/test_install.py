"""tracewatch installs beside anything: the wheel adds no top-level name that is not ours,
and the command runs from a project folder that has packages named `core` and `tui` of
its own (Django projects and many ML repositories do), the demo's servers included."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.polling import MARGIN, wait_until
from tests.support.repo import REPO
from tests.support.tether import TetheredProcess

TRACEWATCH = Path(sys.executable).with_name("tracewatch")
NOT_SOURCE = shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis")


def test_the_wheel_adds_only_names_of_ours(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=NOT_SOURCE)  # a build writes into its tree
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("tracewatch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"tracewatch", "tracewatch_guest", "tracewatch_relay.py"}
    shipped = {name for name in names if name.endswith((".py", ".tcss", ".json"))}
    # what the app, the demo and the eval tap read from their own folders at run time
    assert {"tracewatch/tui/app.tcss", "tracewatch/core/demo/tokenizer.json", "tracewatch_guest/inject/sitecustomize.py"} <= shipped
    sources = {f"tracewatch/{path.relative_to(REPO).as_posix()}" for folder in ("core", "tui") for path in (REPO / folder).rglob("*.py")}
    assert sources <= shipped, f"missing from the wheel: {sorted(sources - shipped)}"


def _watch_from_a_project_folder(folder: Path, argv: list[str], out: Path) -> list[str]:
    """Run `tracewatch ARGV --headless` from `folder` until a rollout of each variant is
    done, then stop it as Ctrl-C does; its output lines."""
    env = {**os.environ, "TRACEWATCH_HOME": str(folder / "home")}
    env.pop("PYTHONPATH", None)
    with open(out, "w") as sink:
        process = TetheredProcess([str(TRACEWATCH), *argv, "--headless", "--no-record"], stdout=sink, stderr=subprocess.STDOUT, cwd=folder, env=env)
        try:
            def done_by_both() -> bool:
                lines = out.read_text().splitlines()
                return process.poll() is not None or all(any(line.startswith(f"{name}/") and " done " in line for line in lines) for name in ("baseline", "candidate"))

            wait_until(done_by_both, MARGIN * 12, "a rollout of each variant done")
            process.send_signal(signal.SIGINT)
            process.wait(timeout=MARGIN * 3)
        finally:
            process.end()
    return out.read_text().splitlines()


def _a_project_with_its_own_core_and_tui(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    for package in ("core", "core/demo", "tui"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(f"raise RuntimeError('imported the project\\'s own {package}')\n")
    return project


def test_the_demo_runs_from_a_folder_with_its_own_core_and_tui(tmp_path: Path) -> None:
    project = _a_project_with_its_own_core_and_tui(tmp_path)
    lines = _watch_from_a_project_folder(project, ["--speed", "8"], tmp_path / "out.txt")
    assert not any("imported the project" in line or "Traceback" in line for line in lines), lines
    assert any(line.startswith("baseline/") and " done " in line for line in lines), lines


def test_a_config_runs_from_a_folder_with_its_own_core_and_tui(tmp_path: Path) -> None:
    project = _a_project_with_its_own_core_and_tui(tmp_path)
    shutil.copy(REPO / "examples" / "two-variants.toml", project)
    shutil.copy(REPO / "examples" / "tasks.jsonl", project)
    lines = _watch_from_a_project_folder(project, ["two-variants.toml"], tmp_path / "out.txt")
    assert not any("imported the project" in line or "Traceback" in line for line in lines), lines
    assert all(any(line.startswith(f"{name}/") and " done " in line for line in lines) for name in ("baseline", "candidate")), lines
