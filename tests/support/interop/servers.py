"""Start verifiers' own env server (`serve_env`) in a subprocess on 127.0.0.1 and
stop it by PID.

Run as a script, this module is the server: it binds an OS-assigned port and prints
the bound address as its first stdout line, which the parent waits for with a
deadline (no fixed sleeps, no port guessing).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
API_KEY_VAR = "FAKE_MODEL_API_KEY"


def env_config(max_turns: int = 8) -> dict:
    """The served env: `tw_calc` (this folder) with its bash harness, run as local
    subprocesses (verifiers' default runtime is a remote sandbox)."""
    return {
        "taskset": {"id": "tw_calc"},
        "agent": {"runtime": {"type": "subprocess"}, "max_turns": max_turns},
    }


class _PrintAddress:
    """Stands in for the address queue `serve_env` reports its bound address on."""

    def put(self, address: str) -> None:
        print(address, flush=True)


class ServerProcess:
    """A `serve_env` child in its own session, so teardown can reach the pool workers
    it spawns through the process group this test started; tethered to this process,
    so the group ends with a pytest that never got to its teardown."""

    def __init__(self, workers: int, home: Path, startup_timeout: float = 60.0) -> None:
        from tests.support.tether import Tether  # here: run as the server, no `tests` on the path

        env = {
            **os.environ,
            "HOME": str(home),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
            API_KEY_VAR: "fake-key",
            "PYTHONUNBUFFERED": "1",
        }
        self.log = home / f"server-{workers}.log"
        self._log_file = self.log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--workers", str(workers)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            start_new_session=True,
        )
        self._tether = Tether(group=self.process.pid)
        try:
            self.address = self._read_address(startup_timeout)
        except BaseException:
            self.stop()
            raise

    def _read_address(self, timeout: float) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or self.process.poll() is not None:
                raise RuntimeError(f"env server did not report its address; log:\n{self.tail()}")
            ready, _, _ = select.select([self.process.stdout], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 1)
                if not chunk:
                    continue
                line += chunk
        return line.decode().strip()

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (serve_env turns it into a clean shutdown that stops its workers),
        then SIGKILL to this child's process group if it overstays."""
        pid = self.process.pid
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        self.process.wait()
        self._tether.release()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log_file.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    from verifiers.v1.serve import serve_env

    serve_env(
        max_workers=args.workers,
        address="tcp://127.0.0.1:0",
        address_queue=_PrintAddress(),
        elastic=False,
        config_data=env_config(),
    )


if __name__ == "__main__":
    main()
