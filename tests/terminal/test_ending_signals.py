"""Every way a session ends records every rollout's ending: a real `tracewatch` on a
real terminal (tmux) sent SIGINT, SIGTERM or SIGHUP, or its tmux session closed, and
a real `tracewatch --headless` sent each signal, with runs in flight and runs queued.
Before, the screen ended by any of them (and headless by SIGHUP, which had no handler)
left a recording whose rollouts never ended ("6 queued, 4 running" when opened)."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.demo_sessions import demo_variant, write_config
from tests.support.polling import MARGIN, children, pid_gone, wait_until
from tests.support.repo import REPO
from tests.support.terminal import TIMEOUT, Terminal, our_processes, tracewatch
from tests.support.tether import TetheredProcess
from tests.terminal.test_terminal import session_pids
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.session.status import Status

pytestmark = pytest.mark.terminal

ROLLOUTS, SLOTS = 6, 2
"""Stuck rollouts, two at a time: two run until cancelled, four wait in the queue."""

STOPPED = 3 * MARGIN
"""The runs cancelled and the servers stopped (each given its 5 s grace) on a loaded box."""


def stuck_session(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A config of stuck rollouts, the recording it will write and its home."""
    config = write_config(tmp_path, [demo_variant("stuck", ["stuck"] * ROLLOUTS, max_concurrent=SLOTS)])
    return config, tmp_path / "run.twrec", tmp_path / "home"


def assert_every_rollout_ended(recording: Path) -> None:
    """What `open` shows of the recording: each rollout cancelled, with why."""
    rollouts = list(OpenedRecording(recording).store.rollouts.values())
    assert len(rollouts) == ROLLOUTS, [r.key for r in rollouts]
    unended = {r.key: r.status.value for r in rollouts if r.status is not Status.CANCELLED}
    assert not unended, f"rollouts the recording never ended: {unended}"
    assert all(r.reason for r in rollouts), {r.key: r.reason for r in rollouts}


def assert_nothing_left(home: Path, marker: str, spared: set[int]) -> None:
    """No supervisor or server of the session, nor anything naming this test's folder."""
    recorded = session_pids(home)
    assert recorded, "the session's supervisor records"
    wait_until(lambda: all(map(pid_gone, recorded)), MARGIN, f"the session's supervisors and servers {recorded} gone")
    left = {pid: args for pid, args in our_processes(marker).items() if pid not in spared}
    assert not left, left


ON_SCREEN = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, None]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux to drive a real terminal (CI installs it)")
@pytest.mark.parametrize("signum", ON_SCREEN, ids=[s.name if s else "tmux-session-closed" for s in ON_SCREEN])
def test_the_screen_ended_by_a_signal_or_a_closed_terminal_records_every_ending(tmp_path: Path, signum: signal.Signals | None) -> None:
    config, recording, home = stuck_session(tmp_path)
    status, out = tmp_path / "exit-status", tmp_path / "out.txt"
    command = shlex.join(
        ["env", "-u", "COLUMNS", "-u", "LINES", f"TRACEWATCH_HOME={home}", *tracewatch(), str(config), "--record", str(recording)]
    ) + f" > {shlex.quote(str(out))}; echo $? > {shlex.quote(str(status))}"  # the screen is drawn on stderr
    term = Terminal(f"tw-end-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    app = None
    try:
        term.start(command, tmp_path)
        term.wait(lambda screen: f"{ROLLOUTS} rollouts · {SLOTS} running" in screen, "both slots' stuck runs")
        tmux_server = int(term.pane("#{pid}"))
        (app,) = wait_until(lambda: children(int(term.pane("#{pane_pid}"))), MARGIN, "the app under the pane's shell")
        if signum is None:
            term.tmux("kill-session", "-t", term.name)  # the pane's processes get SIGHUP, the terminal goes
        else:
            os.kill(app, signum)
        wait_until(lambda: pid_gone(app), STOPPED, f"the app ({app}) to end")
        if signum is not None:
            wait_until(lambda: status.exists() and status.read_text().strip(), MARGIN, "the shell to write the exit status")
            assert status.read_text().strip() == str(128 + signum), term.screen()
        assert out.read_text().splitlines()[-1:] == [f"recording: {recording}"], "printed after the screen closed"
        assert_every_rollout_ended(recording)
        assert_nothing_left(home, str(tmp_path), spared={tmux_server})
    finally:
        term.kill()
        if app is not None and not pid_gone(app):
            os.kill(app, signal.SIGKILL)


HEADLESS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@pytest.mark.parametrize("signum", HEADLESS, ids=[s.name for s in HEADLESS])
def test_headless_ended_by_a_signal_records_every_ending_and_prints_the_summary(tmp_path: Path, signum: signal.Signals) -> None:
    config, recording, home = stuck_session(tmp_path)
    out_path, err_path = tmp_path / "out.txt", tmp_path / "err.txt"
    env = {**os.environ, "TRACEWATCH_HOME": str(home)}
    with open(out_path, "w") as out, open(err_path, "w") as err:
        process = TetheredProcess(
            [sys.executable, "-m", "tracewatch.cli", str(config), "--headless", "--record", str(recording)],
            stdout=out, stderr=err, env=env, cwd=REPO,
        )  # fmt: skip
        try:
            wait_until(lambda: out_path.read_text().count("[stuck task] running") == SLOTS, TIMEOUT, "both slots' stuck runs")
            process.send_signal(signum)
            code = process.wait(timeout=STOPPED)
        finally:
            process.end()
    lines, errors = out_path.read_text().splitlines(), err_path.read_text()
    assert code == 128 + signum, (lines, errors)
    assert "Traceback" not in errors, errors
    assert f"{signum.name}: cancelling every run and stopping every server (again to kill them now)" in lines
    assert lines[-2:] == [f"stuck: cancelled; {ROLLOUTS} cancelled; mean reward n/a", f"recording: {recording}"], lines
    assert_every_rollout_ended(recording)
    assert_nothing_left(home, str(tmp_path), spared=set())
