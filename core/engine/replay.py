"""A recording replayed at its recorded pace (or as fast as possible, with pause,
step and seek). It fills the same store the live engine fills, so the app shows it
with the same screens; start and cancel are disabled, with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from core.paths import new_session_dir
from core.recordings.apply_records import RecordedVariant, ReplayClock, apply_record
from core.recordings.file_format import Damage
from core.recordings.index import RecordingIndex
from core.recordings.reader import read_recording
from core.session.contracts import ReplayPosition
from core.session.session import Session
from core.session.store import RolloutStore

MAX_GAP = 60.0
"""The longest silence a replay waits out at its recorded pace (times `speed`): a
longer one (a stall, or a damaged time) replays as this long."""

FAST_BATCH = 200
"""Records applied between yields when replaying as fast as possible, so the app
stays responsive."""


class ReplaySession(Session):
    def __init__(self, path: Path, speed: float = 1.0) -> None:
        self.clock = ReplayClock()
        super().__init__(RolloutStore(clock=self.clock), new_session_dir(), path)
        self.recording = read_recording(path)
        span = RecordingIndex.build(path)
        self.total = span.records
        times = [t for s in span.rollouts.values() for t in (s.first_t, s.last_t) if t is not None]
        times += [float(e["t"]) for e in span.events if isinstance(e.get("t"), (int, float))]
        self.first_t, self.last_t = (min(times), max(times)) if times else (0.0, 0.0)
        self.speed = speed
        self.readonly_reason = f"a replay of {path.name}: start and cancel act on live servers only"
        self.paused = False
        self.finished = False
        self.applied = 0
        self._records: Iterator[dict[str, Any]] = iter(self.recording)
        self._resume = asyncio.Event()
        self._player: asyncio.Task[None] | None = None
        self._seek: str | None = None
        self.variants: dict[str, RecordedVariant] = {}
        self.damage = Damage()
        """Records that read back but are not ones the app writes: skipped, counted."""

    @property
    def truncated(self) -> str | None:
        return self.damage.note(self.recording.truncated, self.recording.path)

    @property
    def replay(self) -> ReplaySession:
        return self

    async def start(self) -> None:
        self._resume.set()
        self._player = asyncio.get_running_loop().create_task(self._play())

    async def wait(self) -> None:
        if self._player is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._player

    async def shutdown(self, on_progress: Callable[[str], None] = lambda _: None) -> None:
        if self._player is not None:
            self._player.cancel()
        await self.wait()
        on_progress("replay stopped")

    def position(self) -> ReplayPosition:
        played = max(0.0, self.clock.now - self.first_t) if self.applied else 0.0
        return ReplayPosition(
            self.applied, self.total, played, self.last_t - self.first_t, self.paused, self.finished,
        )

    def toggle_pause(self) -> bool:
        self.paused = not self.paused
        if self.paused:
            self._resume.clear()
        else:
            self._resume.set()
        return self.paused

    def step(self) -> bool:
        """Apply the next record while paused; false at the end."""
        record = next(self._records, None)
        if record is None:
            self.finished = True
            return False
        self._apply(record)
        return True

    def seek(self, rollout_key: str) -> None:
        """Play as fast as possible until that rollout has ended, then pause."""
        self._seek = rollout_key
        self.paused = False
        self._resume.set()

    def _apply(self, record: dict[str, Any]) -> None:
        self.applied += 1
        if self.damage.check(record, f"record {self.applied}", announced=self.store.rollouts):
            return
        if record.get("t"):
            self.clock.now = float(record["t"])
        apply_record(self.store, self.variants, record)

    async def _play(self) -> None:
        previous: float | None = None
        pace_start = time.monotonic()
        burst = 0
        for record in self._records:
            await self._resume.wait()
            t = record.get("t")
            t = t if type(t) in (int, float) else None  # a damaged time is skipped with its record
            fast = self.speed <= 0 or self._seek is not None
            if fast or previous is None or t is None:
                burst += 1
                if burst >= FAST_BATCH:
                    burst = 0
                    await asyncio.sleep(0)
            else:
                target = pace_start + min(t - previous, MAX_GAP) / self.speed
                delay = target - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                pace_start = max(target, time.monotonic() - 0.05)
            if t is not None:
                previous = t
            self._apply(record)
            if self._seek is not None and self._seek in self.store.rollouts:
                if self.store.rollouts[self._seek].status.finished:
                    self._seek = None
                    self.toggle_pause()
        self.finished = True
        for variant in self.variants.values():
            self.store.touch_variant(variant.name)
