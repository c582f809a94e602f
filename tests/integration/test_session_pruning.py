"""Old session folders are pruned to the newest N (`--keep`, config `keep_sessions`),
never one that is running: real `tracewatch --headless` processes share one home."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.demo_sessions import WAIT, demo_variant, write_config
from tests.support.polling import MARGIN, wait_until
from tests.support.repo import REPO
from tests.support.tether import TetheredProcess


def tracewatch(*args: str, home: Path, **kwargs: object) -> TetheredProcess:
    env = {**os.environ, "TRACEWATCH_HOME": str(home)}
    return TetheredProcess(
        [sys.executable, "-m", "tracewatch.cli", *args, "--headless", "--no-record"],
        env=env, cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs,
    )  # fmt: skip


def finish(process: TetheredProcess) -> tuple[int, str, str]:
    with process:
        out, err = process.communicate(timeout=MARGIN * 6)
    return process.returncode, out, err


def test_old_sessions_are_pruned_but_never_a_running_one(tmp_path):
    home = tmp_path / "home"
    sessions = home / "sessions"
    for old in ("20200101-000000-11", "20200101-000000-12", "20200102-000000-5"):
        (sessions / old).mkdir(parents=True)
        (sessions / old / "stdout.log").write_text("old\n")
    (sessions / "notes").mkdir()  # not a session folder: never touched
    for name in ("stuck", "quick"):
        (tmp_path / name).mkdir()
    stuck = write_config(tmp_path / "stuck", [demo_variant("stuck", ["stuck"])])
    quick = write_config(tmp_path / "quick", [demo_variant("quick", ["normal"])])

    running = tracewatch(str(stuck), home=home)
    try:
        wait_until(lambda: len(list(sessions.iterdir())) == 5, WAIT, "the running session's folder")
        (running_dir,) = set(sessions.iterdir()) - {sessions / n for n in ("20200101-000000-11", "20200101-000000-12", "20200102-000000-5", "notes")}
        wait_until(lambda: any(running_dir.rglob("supervisor.json")), WAIT, "its server")

        code, out, err = finish(tracewatch(str(quick), "--keep", "1", home=home))
        assert code == 0, out + err
        left = {p.name for p in sessions.iterdir()}
        assert len(left) == 3 and {running_dir.name, "notes"} < left, left  # the newest, the running one, notes
        assert running.poll() is None
    finally:
        running.send_signal(signal.SIGINT)
        code, out, err = finish(running)
    assert code == 130, out + err

    (tmp_path / "quick" / "tracewatch.toml").write_text("keep_sessions = 1\n" + (tmp_path / "quick" / "tracewatch.toml").read_text())
    code, out, err = finish(tracewatch(str(quick), home=home))
    assert code == 0, out + err
    left = sorted(p.name for p in sessions.iterdir())
    assert len(left) == 2 and "notes" in left and running_dir.name not in left, left  # stopped now: pruned
