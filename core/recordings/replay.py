"""Sessions with nothing live behind them: a recording replayed at its recorded pace
(or as fast as possible, with pause, step and seek), and a finished verifiers run
opened offline. Both fill the same store the live engine fills, so the app shows
them with the same screens; start and cancel are disabled, with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from core.paths import new_session_dir
from core.recordings.apply import RecordedVariant, apply_record, run_of
from core.recordings.export import ORIGIN_KEY
from core.recordings.format import Damage
from core.recordings.index import RecordingIndex
from core.recordings.reader import read_recording
from core.recordings.run_dir import open_run
from core.session.contracts import ReplayPosition, VariantState
from core.session.engine import Session
from core.session.store import RolloutStore
from core.wire.assembly import AssemblyError
from core.wire.protocol import LIST_FIELDS

MAX_GAP = 60.0
"""The longest silence a replay waits out at its recorded pace (times `speed`): a
longer one (a stall, or a damaged time) replays as this long."""

FAST_BATCH = 200
"""Records applied between yields when replaying as fast as possible, so the app
stays responsive."""


class ReplayClock:
    """Recorded time as the replay sees it: the store's `now` is the time of the
    last record applied, so elapsed and idle read as they did live."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


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


class OpenedRun(Session):
    """A finished verifiers run: every episode at once, browsable offline. An episode
    that `tracewatch export --episodes` wrote names its variant (`env.name`); others
    belong to one variant named after the run."""

    def __init__(self, path: Path) -> None:
        super().__init__(RolloutStore(), new_session_dir(), None)
        self.variants: dict[str, RecordedVariant] = {}
        self.run = open_run(path)
        name = (self.run.run_dir or path).name
        self.readonly_reason = f"an offline view of {name}: nothing is running"
        for index, episode in enumerate(self.run.episodes):
            origin = episode.get(ORIGIN_KEY)
            variant = str((episode.get("env") or {}).get("name") or name) if isinstance(origin, dict) else name
            if variant not in self.variants:
                self.variants[variant] = RecordedVariant(variant)
                self.variants[variant].state = VariantState.DONE
            load_episode(self.store, variant, index, episode)


def load_episode(store: RolloutStore, variant: str, index: int, episode: dict[str, Any]) -> None:
    """A whole episode into the store as if it had streamed: each trace as one delta
    (its header, every list item, every scalar), then the reply; an exported partial
    one ends as it ended (cancelled, failed, or still running)."""
    task = episode.get("task") or {}
    origin = episode.get(ORIGIN_KEY)
    origin = origin if isinstance(origin, dict) else {}
    rollout = store.add_rollout(
        variant, origin.get("task_index", index), task.get("data") or task, origin.get("rollout_index", 0),
        key=origin.get("rollout") if isinstance(origin.get("rollout"), str) else None, run=run_of(origin),
    )
    timing = [t.get("timing") or {} for t in episode.get("traces") or []]
    start = min((t.get("start") or 0.0 for t in timing), default=0.0) or None
    end = max((span.get("end") or 0.0 for t in timing for span in t.values() if isinstance(span, dict)), default=0.0)
    store.started(rollout.key, str(episode.get("id") or rollout.key), start)
    for trace in episode.get("traces") or []:
        try:
            store.apply(rollout.key, trace_as_delta(trace), end or start)
        except AssemblyError as error:  # a value no reader could use: shown, not loaded
            store.failed(rollout.key, f"this episode cannot be shown: {error}", t=end or start)
            return
    if not episode.get("partial"):
        store.finished(rollout.key, episode, end or start)
    elif origin.get("ended") != "running":
        store.failed(rollout.key, str(episode.get("error")), cancelled=origin.get("ended") == "cancelled", t=end or start)


HEADER_KEYS = ("version", "id", "verifiers", "task")


def trace_as_delta(trace: dict[str, Any]) -> dict[str, Any]:
    delta: dict[str, Any] = {
        "trace": trace["id"],
        "open": {key: trace[key] for key in HEADER_KEYS if key in trace},
    }
    for key in LIST_FIELDS:
        if trace.get(key):
            delta[key] = trace[key]
    if "pending" in trace:  # a partial episode's preview, as it was when it ended
        delta["pending"] = trace["pending"]
    scalars = {k: v for k, v in trace.items() if k not in HEADER_KEYS and k not in LIST_FIELDS and k != "pending"}
    if scalars:
        delta["set"] = scalars
    return delta


class OpenedRecording(Session):
    """A recording browsed offline. The index lists every rollout at once with its
    outcome; a rollout's records are read and applied only when it is selected, so a
    recording far larger than memory opens in about the time one pass takes."""

    def __init__(self, path: Path) -> None:
        self.clock = ReplayClock()
        super().__init__(RolloutStore(clock=self.clock), new_session_dir(), path)
        self.variants: dict[str, RecordedVariant] = {}
        self.index = RecordingIndex.build(path)
        self.readonly_reason = f"a recording opened offline ({path.name}): nothing is running"
        self.loaded: set[str] = set()
        for event in self.index.events:
            apply_record(self.store, self.variants, event)
        for key, summary in self.index.rollouts.items():
            announce = summary.announce or {}
            variant = str(announce.get("variant") or key.partition("/")[0])
            self.variants.setdefault(variant, RecordedVariant(variant))
            rollout = self.store.add_rollout(
                variant, announce.get("task_index", 0), announce.get("task_data") or {},
                announce.get("rollout_index", 0), key=key, run=run_of(announce), t=summary.first_t,
            )
            rollout.facts = summary.facts
            rollout.started_at = summary.started_t
            if summary.ending is not None:
                self.store.ended(key, summary.ending, t=summary.ended_t)
            else:
                self.store.restore(key, summary.status)
            self.clock.now = max(self.clock.now, summary.last_t or 0.0)

    @property
    def truncated(self) -> str | None:
        return self.index.truncated

    def load(self, key: str) -> None:
        if key in self.loaded or key not in self.index.rollouts:
            return
        self.loaded.add(key)
        self.store.reset_rollout(key)
        for record in self.index.load(key):
            if record.get("k") != "rollout":
                apply_record(self.store, self.variants, record)
