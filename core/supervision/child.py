"""One supervised child process as the app sees it: start it, watch it, cancel it,
and account for how it ended.

The process this class starts is `tracewatch.core.supervision.supervisor`, not the command: the supervisor
holds the read end of a pipe whose write end only this object holds, so when the app
dies, even by SIGKILL, the supervisor reads end-of-file and stops the command. The
command's stdout/stderr go straight to private capture files and never through the
app. Secrets go in `env`, never on argv: argv is visible to every user of the machine.

Single use and strictly ordered: construct, `start()`, `poll()`/`wait()` or
`terminate()`, then `outcome()`. Every reap of the supervisor happens under one lock,
so `terminate()` (blocking, run on a worker thread) can race the UI's `poll()` without
ever signalling a recycled pid.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from tracewatch.core.errors import TracewatchError
from tracewatch.core.paths import private_dir
from tracewatch.core.supervision import capture, supervisor

APP_GRACE_MARGIN_SECONDS = 5.0
"""How much longer than the supervisor's grace `terminate()` waits by default before
it SIGKILLs from outside. The supervisor's escalation must finish first, so a clean
teardown is never cut short and the server gets every second of its configured grace;
the margin covers the supervisor's own SIGKILL, reaping and final record on a loaded
machine."""

CANCEL_EXIT_CODES = frozenset({130, 128 + signal.SIGTERM, 128 + signal.SIGINT})
"""Exit statuses that, after a cancel, mean the command stopped as asked."""

STARTUP_TIMEOUT_SECONDS = 20.0
"""How long `start()` waits for the supervisor to report the command running."""

_TICK = 0.02
_SUPERVISOR_FILE = Path(supervisor.__file__)

Status = Literal["exited", "failed", "cancelled", "killed"]
EventCallback = Callable[[str, dict[str, Any]], None]


class ChildError(TracewatchError, RuntimeError):
    """A supervised child used out of order, or one that could not be started."""


@dataclass(frozen=True)
class CaptureInfo:
    """One capture file as it stood once the child had exited, so a copy can be checked."""

    path: Path
    sha256: str
    size: int


@dataclass(frozen=True)
class ChildOutcome:
    """How a supervised child ended.

    `exit_code` is shell-style (128+signal when a signal ended it); `signal` names
    that signal. `killed` means SIGKILL was needed, by the supervisor or the app.
    `reason` is why the supervisor stopped it (see tracewatch.core.supervision.supervisor), None if unknown.
    """

    label: str
    argv_digest: str
    status: Status
    exit_code: int
    signal: str | None
    reason: str | None
    started_at: datetime
    finished_at: datetime
    elapsed_seconds: float
    cancelled: bool
    killed: bool
    stdout: CaptureInfo
    stderr: CaptureInfo
    record: dict[str, Any] | None


class SupervisedChild:
    def __init__(
        self,
        argv: Sequence[str],
        cwd: str | os.PathLike[str],
        env: Mapping[str, str],
        stdout_path: str | os.PathLike[str],
        stderr_path: str | os.PathLike[str],
        record_path: str | os.PathLike[str],
        deadline_seconds: float,
        supervisor_grace_seconds: float,
        label: str = "",
        finish_without_app: bool = False,
    ) -> None:
        if not argv:
            raise ValueError("argv must name a program")
        self.argv = tuple(argv)
        # absolute: the supervisor resolves paths from the child's cwd, not the app's
        self.cwd = Path(cwd).absolute()
        self.env = dict(env)
        self.stdout_path = Path(stdout_path).absolute()
        self.stderr_path = Path(stderr_path).absolute()
        self.record_path = Path(record_path).absolute()
        self.deadline_seconds = deadline_seconds
        self.supervisor_grace_seconds = supervisor_grace_seconds
        self.label = label
        self.finish_without_app = finish_without_app
        """If the app dies, the command runs on to its end (still under the deadline)."""
        self.argv_digest = supervisor.argv_digest(self.argv)
        self._used = False
        self._process: subprocess.Popen[bytes] | None = None
        self._liveness: int | None = None
        self._lock = threading.Lock()  # every reap and every signal to the supervisor
        self._terminating = threading.Lock()  # one escalation at a time
        self._started_at = datetime.now(UTC)
        self._started_clock = 0.0
        self._finished_at: datetime | None = None
        self._elapsed = 0.0
        self._cancelled = False
        self._app_killed = False
        self._server_pid: int | None = None

    @property
    def pid(self) -> int | None:
        """The supervisor's pid (its process group too), once started."""
        return None if self._process is None else self._process.pid

    @property
    def server_pid(self) -> int | None:
        """The command's own pid (what a user would look for in `ps`), once running."""
        return self._server_pid

    def start(self) -> int:
        """Launch the supervisor, wait until it reports the command running, return its pid."""
        if self._used:
            raise ChildError(
                f"start() was already called for {self._name}; a SupervisedChild is single use"
            )
        self._used = True
        self._check_launchable()
        self._started_at = datetime.now(UTC)
        read_end, self._liveness = os.pipe()
        fds: list[int] = []
        try:
            for path in (self.stdout_path, self.stderr_path, self.record_path):
                private_dir(path.parent)
            for path, stream in ((self.stdout_path, "stdout"), (self.stderr_path, "stderr")):
                line = capture.provenance_line(self.label, stream, self.argv_digest, self._started_at)
                fds.append(capture.open_capture(path, line))
            self._process = subprocess.Popen(
                self._supervisor_argv(read_end),
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=fds[0],
                stderr=fds[1],
                pass_fds=(read_end,),
                start_new_session=True,
            )
        except OSError as error:
            self._close_liveness()
            raise ChildError(f"cannot start {self._name}: {error}") from error
        finally:
            os.close(read_end)
            for fd in fds:
                os.close(fd)
        self._started_clock = time.monotonic()
        self._await_running()
        return self._process.pid

    def poll(self) -> int | None:
        """The exit status once the child has exited (shell-style), else None."""
        self._require_started()
        return self._reap()

    def wait(self, timeout: float | None = None) -> int:
        """Block until the child exits and return its exit status; ChildError on timeout."""
        self._require_started()
        code = self._wait(timeout)
        if code is None:
            raise ChildError(f"{self._name} is still running after {timeout:g}s")
        return code

    def terminate(
        self, grace_seconds: float | None = None, on_event: EventCallback | None = None
    ) -> int:
        """Stop the child: the supervisor sends SIGTERM, waits out its grace, then
        SIGKILL; this waits `grace_seconds` (default: the supervisor's grace plus
        `APP_GRACE_MARGIN_SECONDS`) before it SIGKILLs from outside. Returns the exit status.

        Blocking: call it from a worker thread. `on_event(kind, detail)` runs on that
        thread with "sigterm" {grace_seconds, kill_at} once the supervisor has sent it
        (`kill_at`: the epoch second its SIGKILL is due, so a countdown reaches 0 when
        it is sent), "sigkill" {by: "supervisor" | "app"} and "exited" {exit_code}, so
        the UI can show the escalation as it happens.
        """
        self._require_started()
        emit = on_event or (lambda kind, detail: None)
        if grace_seconds is None:
            grace_seconds = self.supervisor_grace_seconds + APP_GRACE_MARGIN_SECONDS
        with self._terminating:
            if self._signal_supervisor(signal.SIGTERM):
                self._cancelled = True
                self._escalate(grace_seconds, emit)
            code = self._wait(None)
            assert code is not None
            emit("exited", {"exit_code": code})
            return code

    def kill(self) -> bool:
        """SIGKILL the command's group and the supervisor now, without waiting (a second
        cancel). A `terminate()` running on another thread reports it as "sigkill"
        {by: "app"} and returns once the supervisor has exited. False if it had already."""
        self._require_started()
        return self._kill_groups(self.record())

    def record(self) -> dict[str, Any] | None:
        """The supervisor's JSON record as last written, or None if it has not written one."""
        try:
            data = json.loads(self.record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("supervisor_pid") != self.pid:
            return None  # a stale record from an earlier run at the same path
        return data

    def outcome(self) -> ChildOutcome:
        """Describe the finished child, both capture files hashed; ChildError while it runs."""
        self._require_started()
        code = self._reap()
        if code is None:
            raise ChildError(f"{self._name} is still running; outcome() needs it to have exited")
        assert self._finished_at is not None and self._process is not None
        raw = self._process.returncode
        record = self.record()
        if record is not None and record.get("state") == "finished":
            signal_name = record.get("signal")
        else:  # the supervisor itself was killed, or never started the command
            signal_name = signal.Signals(-raw).name if raw < 0 else None
        killed = self._app_killed or signal_name == "SIGKILL" or _sent(record, "SIGKILL")
        return ChildOutcome(
            label=self.label,
            argv_digest=self.argv_digest,
            status=_status(code, cancelled=self._cancelled, killed=killed),
            exit_code=code,
            signal=signal_name,
            reason=(record or {}).get("reason"),
            started_at=self._started_at,
            finished_at=self._finished_at,
            elapsed_seconds=self._elapsed,
            cancelled=self._cancelled,
            killed=killed,
            stdout=self._capture_info(self.stdout_path),
            stderr=self._capture_info(self.stderr_path),
            record=record,
        )

    def __enter__(self) -> SupervisedChild:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self.poll() is None:
            self.terminate()

    @property
    def _name(self) -> str:
        return f"child {self.label or self.argv[0]!r}"

    def _check_launchable(self) -> None:
        """Refuse before launching anything: a supervisor for a missing program is waste."""
        if not self.cwd.is_dir():
            raise ChildError(f"cannot start {self._name}: working directory {self.cwd} does not exist")
        program = self.argv[0]
        if os.sep in program:
            path = self.cwd / program
            found = path.is_file() and os.access(path, os.X_OK)
        else:
            found = shutil.which(program, path=self.env.get("PATH", os.defpath)) is not None
        if not found:
            raise ChildError(
                f"cannot start {self._name}: {program!r} is not an executable program "
                f"(looked relative to {self.cwd} and on the child's PATH)"
            )

    def _supervisor_argv(self, read_end: int) -> list[str]:
        # -I: nothing in the child's cwd or PYTHON* variables can stand in for the supervisor
        return [
            sys.executable, "-I", str(_SUPERVISOR_FILE),
            "--parent-fd", str(read_end),
            "--record", str(self.record_path),
            "--deadline-seconds", repr(float(self.deadline_seconds)),
            "--grace-seconds", repr(float(self.supervisor_grace_seconds)),
            "--on-parent-gone", "finish" if self.finish_without_app else "stop",
            "--", *self.argv,
        ]  # fmt: skip

    def _await_running(self) -> None:
        """Wait for the supervisor's first report; turn a failed start into ChildError."""
        ends_at = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while True:
            exited = self._reap() is not None  # before reading: a record read after exit is final
            record = self.record() or {}
            state = record.get("state")
            if state == "start_failed":
                self._wait(None)
                raise ChildError(f"cannot start {self._name}: {(record or {}).get('error')}")
            if record is not None and state not in (None, "starting"):
                pid = record.get("child_pid")
                self._server_pid = pid if isinstance(pid, int) else None
                return
            if exited:
                raise ChildError(
                    f"the supervisor for {self._name} exited before starting it; "
                    f"see {self.stderr_path}"
                )
            if time.monotonic() > ends_at:
                self._kill_groups(record)
                self._wait(None)
                raise ChildError(
                    f"the supervisor for {self._name} did not report within "
                    f"{STARTUP_TIMEOUT_SECONDS:g}s; see {self.stderr_path}"
                )
            time.sleep(_TICK)

    def _escalate(self, grace_seconds: float, emit: EventCallback) -> None:
        """Wait out the grace, reporting the supervisor's SIGTERM and a SIGKILL (the
        supervisor's or a `kill()`) as they happen; then SIGKILL the command's group and
        the supervisor if either still runs."""
        ends_at = time.monotonic() + grace_seconds
        announced = reported = False
        while self._reap() is None:
            record = self.record()
            announced = self._report_sigterm(announced, record, emit)
            reported = self._report_kill(reported, record, emit)
            if time.monotonic() >= ends_at:
                self._kill_groups(record)
                break
            time.sleep(_TICK)
        self._wait(None)
        record = self.record()
        self._report_sigterm(announced, record, emit)
        self._report_kill(reported, record, emit)

    def _report_sigterm(self, announced: bool, record: dict[str, Any] | None, emit: EventCallback) -> bool:
        if announced:
            return True
        kill_at = (record or {}).get("sigkill_due_at")
        if not _sent(record, "SIGTERM") or not isinstance(kill_at, (int, float)):
            return False
        emit("sigterm", {"grace_seconds": self.supervisor_grace_seconds, "kill_at": float(kill_at)})
        return True

    def _report_kill(self, reported: bool, record: dict[str, Any] | None, emit: EventCallback) -> bool:
        if reported:
            return True
        if self._app_killed:
            emit("sigkill", {"by": "app"})
        elif _sent(record, "SIGKILL"):
            emit("sigkill", {"by": "supervisor", "grace_seconds": self.supervisor_grace_seconds})
        else:
            return False
        return True

    def _reap(self) -> int | None:
        """Poll the supervisor under the lock; on exit, note the time and let go of the pipe."""
        assert self._process is not None
        with self._lock:
            return self._poll_locked()

    def _poll_locked(self) -> int | None:
        assert self._process is not None
        raw = self._process.poll()
        if raw is None:
            return None
        if self._finished_at is None:
            self._finished_at = datetime.now(UTC)
            self._elapsed = time.monotonic() - self._started_clock
            self._close_liveness()
        return raw if raw >= 0 else 128 - raw

    def _wait(self, timeout: float | None) -> int | None:
        ends_at = None if timeout is None else time.monotonic() + timeout
        while (code := self._reap()) is None:
            if ends_at is not None and time.monotonic() >= ends_at:
                return None
            time.sleep(_TICK)
        return code

    def _signal_supervisor(self, signum: int) -> bool:
        """Signal the supervisor's group if it has not exited; the lock keeps its pid ours."""
        assert self._process is not None
        with self._lock:
            if self._poll_locked() is not None:
                return False
            os.killpg(self._process.pid, signum)
            return True

    def _kill_groups(self, record: dict[str, Any] | None) -> bool:
        """SIGKILL the command's group (known from the record) and then the supervisor's;
        False if the supervisor had already exited.

        The supervisor is killed last: while it lives, the command's group id cannot
        have been handed to anyone else. The flags are set under the lock so a
        concurrent `terminate()` sees them before it can see the exit.
        """
        assert self._process is not None
        with self._lock:
            if self._poll_locked() is not None:
                return False
            self._cancelled = self._app_killed = True
            pgid = (record or {}).get("child_pgid")
            if isinstance(pgid, int):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.killpg(self._process.pid, signal.SIGKILL)
            return True

    def _close_liveness(self) -> None:
        if self._liveness is not None:
            os.close(self._liveness)
            self._liveness = None

    def _require_started(self) -> None:
        if self._process is None:
            raise ChildError(f"{self._name} has not been started")

    def _capture_info(self, path: Path) -> CaptureInfo:
        try:
            digest, size = capture.file_digest(path)
        except OSError as error:
            raise ChildError(f"cannot read capture file {path}: {error.strerror}") from error
        return CaptureInfo(path=path, sha256=digest, size=size)


def _sent(record: dict[str, Any] | None, name: str) -> bool:
    return any(sent.get("signal") == name for sent in (record or {}).get("signals", []))


def _status(code: int, *, cancelled: bool, killed: bool) -> Status:
    if killed:
        return "killed"
    if cancelled and (code == 0 or code in CANCEL_EXIT_CODES):
        return "cancelled"
    return "exited" if code == 0 else "failed"
