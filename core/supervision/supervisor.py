"""Run one command so that it cannot outlive the app that started it.

    python core/supervision/supervisor.py --parent-fd N --record PATH \\
        --deadline-seconds S --grace-seconds G [--on-parent-gone stop|finish] -- ARGV...

The app cannot clean up after itself once it is SIGKILLed, so this small process
does it: it starts ARGV in a session (and process group) of its own and stops that
whole group when the app's liveness pipe reads end-of-file, when the hard deadline
passes, or when it is sent SIGTERM/SIGINT itself. With `--on-parent-gone finish` (a
costly eval whose viewer crashed) the app's end is noted (`parent_gone_at`) and the
command runs on to its own end, still under the deadline, signals and reaping. Stopping is SIGTERM, the grace
period (the app waits longer, so this escalation finishes before the app's), then
SIGKILL. Anything left in the group after the command exits is stopped the same
way. The exit status is the command's (128+signal if a signal ended it).

A process that leaves the group (`setsid()`, a daemonizing double fork) would escape
a signal to the group, so on Linux this process is a child subreaper
(`PR_SET_CHILD_SUBREAPER`): every orphaned descendant is reparented to it rather than
to PID 1, and is signalled, waited for and reaped like the group. Where prctl is
missing (not Linux) the record says `subreaper: false` and only the group is stopped.

A JSON record, replaced atomically, says what happened: state (starting, running,
finished, start_failed), why the command was stopped (parent_gone, deadline,
sigterm, sigint, child_exited), each signal sent and when (and the inherited pids it
reached), when SIGKILL is due once SIGTERM is sent (`sigkill_due_at`, epoch seconds,
for the app's countdown), the exit code or signal, and the pids. The app reads it to
learn the child's group and outcome.

Standard library only: the app runs this file in isolated mode (`python -I`), so
nothing in the child's working directory or environment can shadow it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

START_FAILED_EXIT = 127
"""What a shell reports for a command it could not run."""

_TICK = 0.05
_REAP_SECONDS = 5.0
"""How long SIGKILLed inherited processes get to be reaped (one stuck in the kernel
may never go; the supervisor must still exit)."""


def argv_digest(argv: Sequence[str]) -> str:
    """sha256 of the invocation, so records and captures can cite it without repeating it."""
    return hashlib.sha256("\0".join(argv).encode("utf-8")).hexdigest()


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Replace `path` with `data` so a reader sees the old record or the new one, never half."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _processes() -> list[tuple[int, bytes, int, int]] | None:
    """(pid, state, ppid, pgid) of every process, from /proc; None without procfs."""
    try:
        names = os.listdir("/proc")
    except FileNotFoundError:
        return None
    found = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        found.append((int(name), fields[0], int(fields[1]), int(fields[2])))
    return found


def process_alive(pid: int) -> bool:
    """Whether that process still runs; a zombie does not (see `group_alive`)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:  # no procfs: a zombie counts as alive
        return True
    return stat[stat.rindex(b")") + 2 :][:1] not in (b"Z", b"X")


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs.

    Zombies do not count: in many containers PID 1 never reaps orphans, and a dead
    grandchild must not hold an escalation open until SIGKILL.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    processes = _processes()
    if processes is None:  # no procfs: a zombie counts as alive
        return True
    return any(group == pgid and state not in (b"Z", b"X") for _, state, _, group in processes)


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Ask Linux to reparent our orphaned descendants to us; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        status: int = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        return status == 0
    except (OSError, AttributeError):
        return False


def reap_inherited(keep: int) -> list[int]:
    """Reap every exited child but `keep` (Popen reaps that one) and return the pids of
    the children still running: the descendants this subreaper inherited."""
    running = []
    for pid, state, ppid, _ in _processes() or []:
        if ppid != os.getpid() or pid == keep:
            continue
        if state in (b"Z", b"X"):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        else:
            running.append(pid)
    return running


def _now() -> str:
    return datetime.now(UTC).isoformat()


class _Supervision:
    def __init__(
        self, record_path: str, parent_fd: int, deadline: float, grace: float, command: list[str], finish: bool = False
    ) -> None:
        self.command = command
        self.finish_without_parent = finish
        self.record_path = record_path
        self.parent_fd = parent_fd
        self.deadline = deadline
        self.grace = grace
        self.requested: str | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.record: dict[str, Any] = {
            "version": 1,
            "state": "starting",
            "reason": None,
            "argv_digest": argv_digest(command),
            "supervisor_pid": os.getpid(),
            "child_pid": None,
            "child_pgid": None,
            "deadline_seconds": deadline,
            "grace_seconds": grace,
            "subreaper": False,
            "on_parent_gone": "finish" if finish else "stop",
            "parent_gone_at": None,
            "started_at": _now(),
            "finished_at": None,
            "sigkill_due_at": None,
            "signals": [],
            "exit_code": None,
            "signal": None,
            "error": None,
        }

    def on_signal(self, signum: int, _frame: object) -> None:
        if self.requested is None:
            self.requested = "sigterm" if signum == signal.SIGTERM else "sigint"

    def save(self) -> None:
        """Rewrite the record; a failure is reported, never allowed to abandon the child."""
        try:
            write_json_atomic(self.record_path, self.record)
        except OSError as error:
            print(f"tracewatch supervisor: cannot write {self.record_path}: {error}", file=sys.stderr)

    def start(self) -> int | None:
        """Start the command; on failure record why and return the exit status to use."""
        try:
            self.child = subprocess.Popen(self.command, start_new_session=True)
        except OSError as error:
            message = f"cannot run {self.command[0]!r}: {error.strerror or error}"
            print(f"tracewatch supervisor: {message}", file=sys.stderr)
            self.record.update(
                state="start_failed",
                reason="start_failed",
                error=message,
                exit_code=START_FAILED_EXIT,
                finished_at=_now(),
            )
            self.save()
            return START_FAILED_EXIT
        self.record.update(state="running", child_pid=self.child.pid, child_pgid=self.child.pid)
        self.save()
        return None

    def watch(self) -> str:
        """Block until something says the command must stop (or it exits); return why."""
        assert self.child is not None
        ends_at = time.monotonic() + self.deadline
        watched = [self.parent_fd]
        while True:
            if self.requested is not None:
                return self.requested
            if self.child.poll() is not None:
                return "child_exited"
            remaining = ends_at - time.monotonic()
            if remaining <= 0:
                return "deadline"
            readable, _, _ = select.select(watched, [], [], min(_TICK, remaining))
            if readable and not os.read(self.parent_fd, 4096):
                if not self.finish_without_parent:
                    return "parent_gone"
                watched = []
                self.record["parent_gone_at"] = _now()
                self.save()

    def stop(self, reason: str) -> None:
        """SIGTERM the group and what we inherited, give them the whole grace period,
        then SIGKILL whatever is left and reap it."""
        assert self.child is not None
        if reason == "child_exited" and not self.anything_left():
            return
        reached = self.send(signal.SIGTERM)
        sent_at = datetime.now(UTC)
        ends_at = time.monotonic() + self.grace
        self.record["sigkill_due_at"] = sent_at.timestamp() + self.grace
        self.note(signal.SIGTERM, reached, sent_at)
        while time.monotonic() < ends_at:
            if self.child.poll() is not None and not self.anything_left():
                return
            time.sleep(_TICK)
        self.note(signal.SIGKILL, self.send(signal.SIGKILL))
        self.child.wait()
        ends_at = time.monotonic() + _REAP_SECONDS
        while reap_inherited(self.child.pid) and time.monotonic() < ends_at:
            self.send(signal.SIGKILL)  # each goes within a tick or two
            time.sleep(_TICK)

    def anything_left(self) -> bool:
        assert self.child is not None
        return group_alive(self.child.pid) or bool(reap_inherited(self.child.pid))

    def send(self, signum: signal.Signals) -> list[int] | None:
        """Signal the command's group and every inherited descendant (each as its own
        group too, since one that called setsid() leads one). Returns the inherited
        pids signalled, or None if nothing was left to signal."""
        assert self.child is not None
        reached = False
        try:
            os.killpg(self.child.pid, signum)
            reached = True
        except ProcessLookupError:
            pass
        inherited = reap_inherited(self.child.pid)
        for pid in inherited:
            for send in (os.killpg, os.kill):
                try:
                    send(pid, signum)
                    reached = True
                except (ProcessLookupError, PermissionError):
                    continue
        return inherited if reached else None

    def note(self, signum: signal.Signals, reached: list[int] | None, at: datetime | None = None) -> None:
        """Record a signal that reached something."""
        if reached is None:
            return
        sent: dict[str, Any] = {"signal": signum.name, "at": (at or datetime.now(UTC)).isoformat()}
        if reached:
            sent["inherited"] = reached
        self.record["signals"].append(sent)
        self.save()

    def finish(self, reason: str) -> int:
        assert self.child is not None
        code = self.child.wait()
        self.record.update(
            state="finished",
            reason=reason,
            finished_at=_now(),
            exit_code=code if code >= 0 else None,
            signal=signal.Signals(-code).name if code < 0 else None,
        )
        self.save()
        return code if code >= 0 else 128 - code


def _parse(args: list[str]) -> tuple[int, str, float, float, list[str], bool]:
    usage = (
        "usage: python core/supervision/supervisor.py --parent-fd N --record PATH "
        "--deadline-seconds S --grace-seconds G [--on-parent-gone stop|finish] -- ARGV..."
    )
    if "--" not in args:
        raise SystemExit(usage)
    split = args.index("--")
    options, command = args[:split], args[split + 1 :]
    names = ("--parent-fd", "--record", "--deadline-seconds", "--grace-seconds")
    values = dict(zip(options[::2], options[1::2]))
    on_parent_gone = values.pop("--on-parent-gone", "stop")
    keys = options[::2]
    if not command or len(options) % 2 or len(set(keys)) != len(keys) or set(values) != set(names):
        raise SystemExit(usage)
    if on_parent_gone not in ("stop", "finish"):
        raise SystemExit(usage)
    try:
        parent_fd = int(values["--parent-fd"])
        deadline = float(values["--deadline-seconds"])
        grace = float(values["--grace-seconds"])
        os.fstat(parent_fd)
    except (ValueError, OSError) as error:
        raise SystemExit(f"{usage}\n{error}") from None
    return parent_fd, values["--record"], deadline, grace, command, on_parent_gone == "finish"


def main(args: list[str] | None = None) -> int:
    parent_fd, record_path, deadline, grace, command, finish = _parse(sys.argv[1:] if args is None else args)
    supervision = _Supervision(record_path, parent_fd, deadline, grace, command, finish)
    supervision.record["subreaper"] = become_subreaper()
    signal.signal(signal.SIGTERM, supervision.on_signal)
    signal.signal(signal.SIGINT, supervision.on_signal)
    try:
        write_json_atomic(record_path, supervision.record)
    except OSError as error:  # nothing started yet: refuse rather than run unrecorded
        raise SystemExit(f"tracewatch supervisor: cannot write {record_path}: {error}") from None
    failed = supervision.start()
    if failed is not None:
        return failed
    try:
        reason = supervision.watch()
        supervision.stop(reason)
    except BaseException:
        supervision.note(signal.SIGKILL, supervision.send(signal.SIGKILL))  # never leave the group behind
        raise
    return supervision.finish(reason)


if __name__ == "__main__":
    sys.exit(main())
