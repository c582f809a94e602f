"""Start the demo server as a child process and learn its address, for tests and
benchmarks; stop it by its pid. It is tethered: a killed test run leaves no server."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time

from tests.support.tether import TetheredProcess


def launch(
    *,
    speed: float = 1.0,
    seed: int = 0,
    address: str = "tcp://127.0.0.1:0",
    timeout: float = 30.0,
    stderr: int | None = None,
) -> tuple[TetheredProcess, str]:
    """`python -m tracewatch.core.demo` with these flags; returns the process and the address it
    printed as its first stdout line. `stderr` is passed to Popen (None: inherited)."""
    argv = [sys.executable, "-m", "tracewatch.core.demo", "--address", address, "--speed", repr(speed), "--seed", str(seed)]
    proc = TetheredProcess(argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL)
    try:
        return proc, _first_line(proc, timeout)
    except BaseException:
        stop(proc)
        raise


def stop(proc: TetheredProcess, grace: float = 5.0) -> int:
    """SIGTERM by pid, then SIGKILL after `grace` seconds; returns the exit code."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    proc.end()
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the demo server printed no address within {timeout:g}s")
            if not selector.select(left):
                continue
            chunk = os.read(proc.stdout.fileno(), 1)
            if not chunk:
                raise RuntimeError(f"the demo server exited (code {proc.wait()}) before printing its address")
            line += chunk
    return line.decode().strip()
