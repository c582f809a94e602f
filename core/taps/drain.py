"""How a tap reads what its source queued for it without holding the app's loop: a
slice of time at a time, and at a stop for a bounded while, the rest counted unread.

Counted in items (2,000 a turn), a backlog of large deltas held the loop for seconds
under load, and a key press, a SIGTERM and the stop itself waited behind it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import zmq
import zmq.asyncio

TURN_SECONDS = 0.02
"""The longest a tap reads before the loop gets a turn."""
STOP_SECONDS = 0.5
"""At a stop, how long what is still queued is read; the rest is counted, not read."""

Item = TypeVar("Item")


def read_for(seconds: float, take: Callable[[], Sequence[Item]], handle: Callable[[Item], None]) -> int:
    """Handle what `take` returns (a small chunk; empty when nothing is queued) for
    up to `seconds`; how many were handled."""
    ends = time.monotonic() + seconds
    handled = 0
    while time.monotonic() < ends and (items := take()):
        for item in items:
            handle(item)
        handled += len(items)
    return handled


async def read_until(ends: Callable[[], float], take: Callable[[], Sequence[Item]], handle: Callable[[Item], None]) -> None:
    """Read what is queued a turn at a time until it runs out or the clock passes
    `ends()` (asked each turn: a stop may bring it forward)."""
    while time.monotonic() < ends() and read_for(TURN_SECONDS, take, handle):
        await asyncio.sleep(0)


def count_left(take: Callable[[], Sequence[Item]], weigh: Callable[[Item], int] = lambda _: 1) -> int:
    """Empty the queue without reading it; how many messages were left, each item
    `weigh`ing as many as it holds (a relay's batch holds many, its heartbeat none)."""
    left = 0
    while items := take():
        left += sum(map(weigh, items))
    return left


def left_unread(count: int, what: str) -> str:
    """How a tap's stop that left some of `what` unread says so, on its card and summary."""
    return f"left {count:,} {what} unread at the stop"


class SocketQueue:
    """The messages queued on a ZMQ socket of the app's loop, taken without waiting."""

    def __init__(self, socket: zmq.asyncio.Socket) -> None:
        self.socket = socket
        self._now: zmq.Socket[bytes] = zmq.Socket.shadow(socket.underlying)

    def take(self) -> list[list[bytes]]:
        """The next message, or none when nothing is queued."""
        try:
            return [self._now.recv_multipart(zmq.NOBLOCK)]
        except zmq.Again:
            return []

    async def wait(self, seconds: float | None = None) -> bool:
        """Until a message is queued (True) or `seconds` pass (False)."""
        timeout = None if seconds is None else max(0, math.ceil(seconds * 1000))
        return bool(await self.socket.poll(timeout))  # POLLIN

    async def read_forever(self, handle: Callable[[list[bytes]], None]) -> None:
        """Handle every message as it comes, a turn of the loop at a time."""
        while True:
            await self.wait()
            await read_until(lambda: math.inf, self.take, handle)

    async def read_at_stop(
        self, handle: Callable[[list[bytes]], None], ends: Callable[[], float], quiet: float, weigh: Callable[[list[bytes]], int] = lambda _: 1
    ) -> int:
        """Read what is queued, and what arrives until `quiet` seconds pass without a
        message, until `ends()`; count what is queued then (what is still on its way
        is neither), each socket message as `weigh` says. How many were left unread."""
        while time.monotonic() < ends():
            await read_until(ends, self.take, handle)
            if not await self.wait(min(quiet, max(0.0, ends() - time.monotonic()))):
                break
        return count_left(self.take, weigh)
