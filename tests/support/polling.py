"""Waiting in tests, one copy for every file: polls with a deadline (never a fixed
sleep as synchronisation), and whether a process is really gone."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

from tracewatch.core.supervision.supervisor import process_alive as alive

T = TypeVar("T")

MARGIN = 10.0
"""Slack for a loaded 2-core machine; a passing run never waits this long."""


What: TypeAlias = str | Callable[[], str]
"""What a wait is for; a callable is asked at the timeout, so the failure says what
was seen then (the screen, the processes, what had arrived so far)."""


def _expired(ends_at: float, timeout: float, what: What, predicate: Any) -> None:
    if time.monotonic() > ends_at:
        said = what() if callable(what) else what
        raise AssertionError(f"timed out after {timeout:g}s waiting for {said or predicate}")


def wait_until(predicate: Callable[[], T], timeout: float = MARGIN, what: What = "", every: float = 0.02) -> T:
    """Poll `predicate` from plain code until it returns something truthy; `every` is
    the pause between looks (longer where a look starts processes)."""
    ends_at = time.monotonic() + timeout
    while not (value := predicate()):
        _expired(ends_at, timeout, what, predicate)
        time.sleep(every)
    return value


async def eventually(
    predicate: Callable[[], T],
    timeout: float = MARGIN,
    what: What = "",
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> T:
    """Poll `predicate` on the event loop; `sleep` is what a miss waits on (a Textual
    pilot's `pause`, so the app gets to process messages in between)."""
    ends_at = time.monotonic() + timeout
    while not (value := predicate()):
        _expired(ends_at, timeout, what, predicate)
        await sleep(0.02)
    return value


async def while_moving(
    done: Callable[[], object],
    progress: Callable[[], int],
    what: What = "",
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> None:
    """Until `done`, for work a loaded machine takes longer than MARGIN over (a
    backlog drained, a replay at full speed): the deadline is for progress, each
    MARGIN must raise `progress` or bring the end."""
    while not done():
        before = progress()
        await eventually(lambda before=before: done() or progress() > before, what=what, sleep=sleep)  # type: ignore[misc]


async def until(pilot: Any, condition: Callable[[], T], what: What = "", timeout: float = MARGIN) -> T:
    """`eventually` for a running app, letting it refresh between looks."""
    return await eventually(condition, timeout, what, sleep=pilot.pause)


def pid_gone(pid: int) -> bool:
    """Not running: no such process, or a zombie (PID 1 here may never reap orphans)."""
    return not alive(pid)


def children(pid: int) -> list[int]:
    """The live children of a process, from /proc (a thread that ends between the
    listing and the read has none)."""
    found: list[int] = []
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as listing:
                found += [int(child) for child in listing.read().split()]
        except FileNotFoundError:
            continue
    return found
