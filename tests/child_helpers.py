"""Shared helpers for the supervision tests: real processes, polled with deadlines."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from core.child import SupervisedChild

T = TypeVar("T")
HERE = Path(__file__).parent
PROGRAM = HERE / "child_program.py"
HOLDER = HERE / "child_holder.py"
MARGIN = 10.0
"""Slack for a loaded 2-core machine; a passing run never waits this long."""


def wait_until(predicate: Callable[[], T], timeout: float = MARGIN, what: str = "") -> T:
    """Poll `predicate` until it returns something truthy; fail after `timeout`."""
    ends_at = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > ends_at:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or predicate}")
        time.sleep(0.02)
    return value


def pid_gone(pid: int) -> bool:
    """Not running: no such process, or a zombie (PID 1 here may never reap orphans)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(b")") + 2 :].split()[0] in (b"Z", b"X")


def program(*flags: str) -> list[str]:
    return [sys.executable, str(PROGRAM), *flags]


def child_kwargs(tmp_path: Path, argv: list[str], **overrides) -> dict:
    kwargs = dict(
        argv=argv,
        cwd=str(tmp_path),
        env={"PATH": os.environ.get("PATH", os.defpath)},
        stdout_path=str(tmp_path / "captures" / "out.log"),
        stderr_path=str(tmp_path / "captures" / "err.log"),
        record_path=str(tmp_path / "captures" / "record.json"),
        deadline_seconds=60.0,
        supervisor_grace_seconds=0.5,
        label="test variant",
    )
    kwargs.update(overrides)
    return kwargs


def make_child(tmp_path: Path, argv: list[str], **overrides) -> SupervisedChild:
    return SupervisedChild(**child_kwargs(tmp_path, argv, **overrides))


def reported_pids(capture: Path, grandchildren: int = 0) -> dict[str, list[int]]:
    """Wait for the test program's `ready` and return the pids it printed, by role."""

    def read() -> dict[str, list[int]] | None:
        lines = capture.read_text().splitlines()
        if "ready" not in lines:
            return None
        pids: dict[str, list[int]] = {"child": [], "grandchild": []}
        for line in lines:
            role, _, pid = line.partition(" ")
            if role in pids:
                pids[role].append(int(pid))
        return pids

    pids = wait_until(read, what=f"'ready' in {capture}")
    assert len(pids["grandchild"]) == grandchildren
    return pids
