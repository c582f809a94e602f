"""A real terminal for the `tracewatch` command: one tmux server on a private socket,
tethered to the pytest that started it (`tests.support.tether`), so neither it nor the
app in it outlives a test that timed out or a pytest that was killed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.polling import alive, wait_until
from tests.support.tether import Tether

TIMEOUT = 45.0
"""The demo's stuck rollouts start only once earlier ones free a slot; a loaded
machine needs the slack. Waits end as soon as their condition holds."""


def tracewatch() -> list[str]:
    """The console script next to this interpreter, else the module: works from any venv."""
    script = Path(sys.executable).with_name("tracewatch")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tracewatch.cli"]


class Terminal:
    """One tmux server on a private socket, one session: type keys, read the screen."""

    def __init__(self, name: str) -> None:
        self.socket = name
        self.name = name
        self._tether: Tether | None = None

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10)
        if done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def start(self, command: str, cwd: Path) -> None:
        self._tether = Tether(tmux_socket=self.socket)
        # remain-on-exit: the last screen stays readable for a failure message
        self.tmux(
            "-f", "/dev/null", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "48", "-c", str(cwd), command,
            ";", "set-option", "-t", self.name, "remain-on-exit", "on",
        )

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def pane(self, fmt: str) -> str:
        return self.tmux("display-message", "-p", "-t", self.name, fmt).strip()

    def wait(self, condition: Callable[[str], object], what: str, timeout: float = TIMEOUT) -> str:
        def shown() -> str | None:
            screen = self.screen()
            if condition(screen):
                return screen
            if self.pane("#{pane_dead}") == "1":
                raise AssertionError(f"the app exited while waiting for {what}:\n{screen}")
            return None

        # each look starts two tmux clients: a tenth of a second apart, not a fiftieth
        return wait_until(shown, timeout, lambda: f"{what}; the screen:\n{self.screen()}", every=0.1)

    def processes(self) -> str:
        """The pane's process and its children, for a failure message."""
        pid = self.pane("#{pane_pid}")
        listing = subprocess.run(["ps", "-ww", "-o", "pid=,ppid=,stat=,args=", "--pid", pid, "--ppid", pid], capture_output=True, text=True)
        return f"pane pid {pid}: {listing.stdout.strip() or 'gone'}"

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)
        if self._tether is not None:
            self._tether.release()


def our_processes(marker: str) -> dict[int, str]:
    """Live processes whose command line names `marker` (this test's own directory)."""
    listing = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        if marker in args and alive(int(pid)):
            found[int(pid)] = args
    return found


