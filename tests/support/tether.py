"""What a test starts outside pytest's own process tree (a child in its own session
and the workers it spawns, a tmux server) must not outlive the pytest that started
it, even one that never runs its finalizers: killed with SIGKILL, ended by
`timeout`'s SIGTERM, or by pytest-timeout's thread method (`os._exit`).

A tether is a watchdog process in a session of its own holding the read end of a pipe
whose write end only pytest holds, as the supervisor does for the app. The kernel
closes the write end however pytest ends; reading end-of-file without the word that
the test let go, the watchdog ends what it was tied to. Run as a script, this module
is that watchdog, standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

RELEASED = b"released"
"""What a test that cleaned up after itself writes before it closes its end."""


class Tether:
    """Ties a process group or a tmux server (by its socket name) to this process."""

    def __init__(self, *, group: int | None = None, tmux_socket: str | None = None) -> None:
        target = ["group", str(group)] if group is not None else ["tmux", str(tmux_socket)]
        read_end, self._write_end = os.pipe()
        try:
            self.watchdog = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), str(read_end), *target],
                pass_fds=(read_end,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a signal to pytest's group does not reach it
            )
        finally:
            os.close(read_end)

    def release(self) -> None:
        """The test ended what it started: the watchdog leaves and ends nothing (a
        process group's number may be another's by now)."""
        if self._write_end < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._write_end, RELEASED)
        os.close(self._write_end)
        self._write_end = -1
        self.watchdog.wait(timeout=10)


class TetheredProcess(subprocess.Popen):
    """A child in a session of its own whose process group is tethered to this pytest:
    it, and the workers it starts in its group, end with the test run however pytest
    ends. `end()` ends what is left of the group, reaps the child and lets go of the
    tether; so does leaving a `with` block."""

    def __init__(self, args: Any, **kwargs: Any) -> None:
        super().__init__(args, start_new_session=True, **kwargs)
        try:
            self.tether = Tether(group=self.pid)
        except BaseException:
            self.kill()
            self.wait()
            raise

    def end(self) -> None:
        if self.returncode is None:  # not reaped yet: the group's number is still its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        self.wait()
        self.tether.release()

    def __exit__(self, *exc: object) -> None:
        self.end()
        super().__exit__(*exc)


def run_tethered(args: Any, *, timeout: float, capture_output: bool = False, input: Any = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """`subprocess.run`, the child tethered: past `timeout` (or if pytest dies) its
    whole group is ended, not only the child."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with TetheredProcess(args, **kwargs) as process:
        out, err = process.communicate(input, timeout=timeout)
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def _watch(read_end: int, kind: str, target: str) -> None:
    said = b""
    while chunk := os.read(read_end, 64):
        said += chunk
    if said == RELEASED:
        return
    if kind == "group":
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(target), signal.SIGKILL)
    else:
        subprocess.run(["tmux", "-L", target, "kill-server"], capture_output=True, timeout=30)


if __name__ == "__main__":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closing terminal is not pytest's end
    _watch(int(sys.argv[1]), sys.argv[2], sys.argv[3])
