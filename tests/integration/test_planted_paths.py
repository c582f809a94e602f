"""Links and folders someone else planted where tracewatch writes: an export never
writes through a link beside its output, and a home, sessions/ or recordings/ folder
another user could redirect or write into is refused with the reason, before anything
is written."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.demo_sessions import demo_variant, write_config
from tests.support.fixture_recording import record_fixture
from tests.support.repo import REPO

VICTIM_TEXT = "someone else's file\n"


def tracewatch(*argv: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRACEWATCH_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "tracewatch.cli", *argv], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)


def plant_victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    victim.chmod(0o644)
    return victim


@pytest.mark.parametrize("how", [[], ["--episodes"], ["--trace-events"]])
@pytest.mark.parametrize("planted", ["partial", "output"])
def test_a_planted_link_beside_or_at_the_output_never_receives_the_export(tmp_path, how, planted):
    recording = tmp_path / "fixture.twrec"
    record_fixture(recording)
    victim = plant_victim(tmp_path)
    out = tmp_path / "out.jsonl"
    os.symlink(victim, out if planted == "output" else tmp_path / f".{out.name}.partial")

    done = tracewatch("export", str(recording), str(out), *how, home=tmp_path / "home")

    assert done.returncode == 0, done.stderr
    assert victim.read_text() == VICTIM_TEXT and stat.S_IMODE(victim.stat().st_mode) == 0o644
    info = os.lstat(out)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert out.read_text().count("\n") > 1
    assert not list(tmp_path.glob(".out.jsonl.*.partial"))


def _untrusted(home: Path, tmp_path: Path, case: str) -> tuple[Path, str]:
    """Plant `case` under `home`; return the folder the refusal must name and why."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    folder = home if case.startswith("home") else home / case.split()[0]
    if case != "home symlink":
        home.mkdir(mode=0o700)
    if case.endswith("symlink"):
        os.symlink(elsewhere, folder)
        return folder, "is a symlink"
    if folder != home:
        folder.mkdir(mode=0o700)
    if case.endswith("writable"):
        folder.chmod(0o777 if case.startswith("home") else 0o770)
        return folder, "is writable by others"
    os.chown(folder, 65534, 65534)
    return folder, "belongs to another user (uid 65534)"


CASES = ["home symlink", "home writable", "sessions symlink", "sessions writable", "sessions foreign",
         "recordings symlink", "recordings writable", "recordings foreign"]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_a_home_or_its_folders_that_others_control_are_refused_with_the_reason(tmp_path, case):
    if case.endswith("foreign") and os.getuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    home = tmp_path / "home"
    folder, why = _untrusted(home, tmp_path, case)
    config = write_config(tmp_path, [demo_variant("v", ["normal"])])

    done = tracewatch("--headless", str(config), home=home)

    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"tracewatch: {folder} {why}" in done.stderr and "refusing it" in done.stderr
    assert "Traceback" not in done.stderr
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_home_of_ones_own_is_used(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)  # readable by others is the user's choice; writable is not
    config = write_config(tmp_path, [demo_variant("v", ["normal"])])
    done = tracewatch("--headless", str(config), home=home)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in home.iterdir()} == {"sessions", "recordings"}
