"""Tests that start what a test can leave behind, say they are ready, then wait to be
killed: `tests/integration/test_killed_pytest.py` runs each in a pytest of its own and
kills that pytest with SIGKILL mid-test. Not collected by a plain run (the file's name
is not test_*.py); named on the command line, they are."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support.demo_launch import launch
from tests.support.interop.servers import ServerProcess
from tests.support.polling import children, wait_until
from tests.support.terminal import Terminal, tracewatch
from tests.support.tether import TetheredProcess
from tracewatch.core.ports import free_address

READY = "TW_HELD_READY"
"""The file each test writes what it started to, once it is all up."""


def ready(*pids: int) -> None:
    Path(os.environ[READY]).write_text(" ".join(map(str, pids)))


def test_servers_held(tmp_path: Path) -> None:
    """verifiers' serve_env with two workers, as the interop tests start it."""
    server = ServerProcess(2, tmp_path)
    ready(server.process.pid)
    signal.pause()


def test_terminal_held(tmp_path: Path) -> None:
    """The demo in tmux, as the terminal tests start it."""
    home = tmp_path / "home"
    command = shlex.join(["env", "-u", "COLUMNS", "-u", "LINES", f"TRACEWATCH_HOME={home}", *tracewatch(), "--no-record"])
    term = Terminal(f"tw-held-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    term.start(command, tmp_path)
    term.wait(lambda screen: " running" in screen, "the demo's rollouts to run")
    ready(int(term.pane("#{pid}")), int(term.pane("#{pane_pid}")))
    signal.pause()


def test_proxy_held(tmp_path: Path) -> None:
    """A headless proxy and its forwarding process in front of the demo server, as the
    proxy tests start them."""
    demo, upstream = launch()
    argv = [sys.executable, "-m", "tracewatch.cli", "proxy", "--listen", free_address(), "--upstream", upstream, "--headless", "--no-record"]
    proxy = TetheredProcess(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (forwarding,) = wait_until(lambda: children(proxy.pid), 60, "the forwarding process")
    ready(demo.pid, proxy.pid, forwarding)
    signal.pause()
