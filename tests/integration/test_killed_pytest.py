"""A pytest killed mid-test (SIGKILL: no finalizer, no atexit) leaves nothing of what
its test started: verifiers' env server and its pool workers, a tmux server and the
app and demo servers in it, a headless proxy, its forwarding process and the demo
server behind it. Each test runs one of `tests/support/held_resources.py` in
a pytest of its own, kills it once the test is up, and waits for the rest to go."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.held_resources import READY
from tests.support.polling import children, pid_gone, wait_until
from tests.support.repo import REPO

STARTUP = 120.0
"""A loaded machine starts verifiers' server and its workers, or the demo, slowly."""
GONE = 30.0
"""What ends them (a watchdog, then a supervisor's grace) runs in well under this."""


def descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            kids = children(parent)
        except OSError:
            continue
        todo += [kid for kid in kids if kid not in found]
        found.update(kids)
    return found


def group_members(group: int) -> set[int]:
    """Live processes in a process group, from /proc."""
    members = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[2]) == group:
                members.add(int(entry))
    return members


def held(test: str, tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A pytest running one held test, and the pids the test said it started."""
    ready = tmp_path / "ready"
    log = (tmp_path / "pytest.log").open("wb")
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "inner"), f"tests/support/held_resources.py::{test}"]
    process = subprocess.Popen(argv, cwd=REPO, env={**os.environ, READY: str(ready)}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: ready.exists() and ready.read_text() or process.poll() is not None, STARTUP, f"{test} to start")
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    assert process.poll() is None, (tmp_path / "pytest.log").read_text()
    return process, [int(pid) for pid in ready.read_text().split()]


def kill_and_wait(process: subprocess.Popen[bytes], started: set[int]) -> None:
    """SIGKILL the pytest, then wait for all it `started` to end; whatever outlived the
    deadline is ended here, so a failing run leaves nothing either."""
    try:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        wait_until(lambda: all(pid_gone(pid) for pid in started), GONE, "everything the killed test started to end")
    finally:
        for pid in started:
            if not pid_gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_killed_pytest_leaves_no_env_server_or_worker(tmp_path: Path) -> None:
    process, (server,) = held("test_servers_held", tmp_path)
    wait_until(lambda: len(group_members(server)) >= 3, STARTUP, "the server and its two workers")
    started = group_members(server) | descendants(server)
    kill_and_wait(process, started)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux to drive a real terminal (CI installs it)")
def test_a_killed_pytest_leaves_no_terminal_or_app(tmp_path: Path) -> None:
    process, (tmux_server, app) = held("test_terminal_held", tmp_path)
    started = {tmux_server, app} | descendants(tmux_server)
    assert len(started) >= 4, f"the app, its supervisors and servers: {started}"
    kill_and_wait(process, started)


def test_a_killed_pytest_leaves_no_proxy_or_demo_server(tmp_path: Path) -> None:
    """Both were plain children of pytest: killed, it left them running (a headless
    proxy waits for drivers forever)."""
    process, (demo, proxy, forwarding) = held("test_proxy_held", tmp_path)
    kill_and_wait(process, {demo, proxy, forwarding})
