"""A recording replayed at its recorded pace (or as fast as possible, with pause,
step and seek). It fills the same store the live engine fills, so the app shows it
with the same screens; start and cancel are disabled, with the reason.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tracewatch.core.paths import new_session_dir
from tracewatch.core.recordings.apply_records import RecordedVariant, ReplayClock, apply_record
from tracewatch.core.recordings.file_format import Damage, RecordingError
from tracewatch.core.recordings.reader import read_recording, recording_span
from tracewatch.core.session.contracts import ReplayPosition
from tracewatch.core.session.session import Session
from tracewatch.core.session.store import RolloutStore

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
        self.total: int | None = None
        """The records in the file, and the times they span: counted by a thread
        while the replay starts, so a large recording's first screen does not wait
        for a pass over the whole file (`position` says the rest once it is known)."""
        self.first_t = self.last_t = 0.0
        self._first_applied: float | None = None
        threading.Thread(target=self._measure, args=(path,), name="replay span", daemon=True).start()
        self.speed = speed
        self.readonly_reason = f"a replay of {path.name}: start and cancel act on live servers only"
        self.paused = False
        self.finished = False
        self.applied = 0
        self._records: Iterator[dict[str, Any]] = iter(self.recording)
        self._resume = asyncio.Event()
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
        self._read_on_the_loop(self._play())

    async def shutdown(self, on_progress: Callable[[str], None] = lambda _: None) -> None:
        await self._stop_reading()
        on_progress("replay stopped")

    def _measure(self, path: Path) -> None:
        try:
            span = recording_span(path)
        except (OSError, RecordingError):  # gone or replaced since it opened: the position says less
            return
        self.first_t, self.last_t = span.first_t or 0.0, span.last_t or 0.0
        self.total = span.records  # last: a position that sees it sees the times too

    def position(self) -> ReplayPosition:
        total = self.total
        first = self.first_t if total is not None else self._first_applied
        played = max(0.0, self.clock.now - first) if self.applied and first is not None else 0.0
        duration = self.last_t - self.first_t if total is not None else None
        return ReplayPosition(self.applied, total, played, duration, self.paused, self.finished)

    @property
    def fast(self) -> bool:
        return not (self.paused or self.finished) and (self.speed <= 0 or self._seek is not None)

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
        if record.get("t"):  # a time before the last (a late-joined run's start) does not turn the clock back
            self.clock.now = max(self.clock.now, float(record["t"]))
            if self._first_applied is None:
                self._first_applied = self.clock.now
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
                previous = t if previous is None else max(previous, t)
            self._apply(record)
            if self._seek is not None and self._seek in self.store.rollouts:
                if self.store.rollouts[self._seek].status.finished:
                    self._seek = None
                    self.toggle_pause()
        self.finished = True
        for variant in self.variants.values():
            self.store.touch_variant(variant.name)
