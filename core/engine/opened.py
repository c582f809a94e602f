"""Sessions with nothing running behind them, opened offline: a finished verifiers
run, or a recording browsed rollout by rollout. Both fill the same store the live
engine fills, so the app shows them with the same screens; start and cancel are
disabled, with the reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from tracewatch.core.paths import new_session_dir
from tracewatch.core.recordings.apply_records import (
    RecordedVariant,
    ReplayClock,
    apply_record,
    recorded_task_key,
    run_of,
)
from tracewatch.core.recordings.export import ORIGIN_KEY
from tracewatch.core.recordings.index import RecordingIndex, RolloutSummary
from tracewatch.core.recordings.load_episodes import TaskNumbers, load_episode
from tracewatch.core.recordings.prime_rl.layout import StreamRun, detect
from tracewatch.core.recordings.prime_rl_dir import ROLLOUTS, open_prime_rl, rollouts_dir
from tracewatch.core.recordings.run_dir import open_run
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.session import Session
from tracewatch.core.session.store import RolloutStore

if TYPE_CHECKING:
    from tracewatch.core.engine.followed_run import FollowedRun

SLICE_SECONDS = 0.02
"""How long the index reads between hand-backs of the loop while a recording opens
for the screen, so keys are answered meanwhile."""

SLICE_STEP = 100
"""Records read between looks at the slice's clock."""

SHOW_EVERY = 0.25
"""How often the rows read so far are shown while the index reads on (the first
slice's at once): a row's facts are computed once per showing, not once per slice,
whose many showings took the pass's CPU."""


class OpenedRun(Session):
    """A finished verifiers run, browsable offline: its episodes read one at a time
    into the store, which keeps them packed (the file is never held whole). An episode
    that `tracewatch export --episodes` wrote names its variant (`env.name`); others
    belong to one variant named after the run. Lines that are not episodes, and a
    saved config that cannot be read, are said where a recording's damage is."""

    offline = True

    def __init__(self, path: Path) -> None:
        super().__init__(RolloutStore(), new_session_dir(), None)
        self.variants: dict[str, RecordedVariant] = {}
        self.run = open_run(path)
        name = (self.run.run_dir or path).name
        self.readonly_reason = f"an offline view of {name}: nothing is running"
        numbers: dict[str, TaskNumbers] = {}
        for episode in self.run.episodes():
            env = episode.get("env")
            named = env.get("name") if isinstance(env, dict) and isinstance(episode.get(ORIGIN_KEY), dict) else None
            variant = named if isinstance(named, str) and named else name
            if variant not in self.variants:
                self.variants[variant] = RecordedVariant(variant)
                self.variants[variant].state = VariantState.DONE
            load_episode(self.store, variant, numbers.setdefault(variant, TaskNumbers()), episode)
        if not self.store.rollouts:  # a run that has not finished an episode yet, or wrote none
            empty = self.variants[name] = RecordedVariant(name)
            empty.state = VariantState.DONE
            empty.reason = f"no episodes: {self.run.traces_path} holds none yet"
            self.readonly_reason = f"an offline view of {name}: {empty.reason}"

    @property
    def truncated(self) -> str | None:
        return skipped_note(self.run.traces_path, self.run.skipped, self.run.config_problem)


def skipped_note(path: Path, skipped: list[str], *problems: str | None) -> str | None:
    """What a run folder's reader passed over: lines that are not episodes (how many,
    and the first), and any other problem."""
    parts = [problem for problem in problems if problem]
    if skipped:
        parts.insert(0, f"{len(skipped)} line(s) skipped, the first: {skipped[0]}")
    return f"{path}: " + "; ".join(parts) if parts else None


def open_folder(
    path: Path, follow: bool | None = None, until_idle: float | None = None, columns: bool = False
) -> OpenedRun | OpenedTrainingRun | FollowedRun:
    """A run's folder or traces file: a prime-rl run in the stream layout (its output
    dir, `monitors/file/` or `traces/`) read whole now (`follow` None: the offline
    commands), or read on the session's loop once it starts, followed or not; a
    prime-rl output directory of the older layout as its training run; anything else
    as a verifiers run. `columns`: a prime-rl run's finished episodes stay columns
    (`FollowedRun`), as the screen draws them."""
    found = detect(path) if path.is_dir() else None
    if isinstance(found, StreamRun):
        from tracewatch.core.engine.followed_run import FollowedRun  # numpy's columns: only for a run that has them

        run = FollowedRun(found, bool(follow), until_idle, columns=columns and follow is not None)
        return run.snapshot() if follow is None else run
    folder = rollouts_dir(path)
    return OpenedTrainingRun(folder) if folder is not None else OpenedRun(path)


class OpenedTrainingRun(Session):
    """A prime-rl run's rollouts, as its file monitor wrote them step by step: one
    variant per kind (`train`, `eval`), each rollout with the step that logged it."""

    offline = True

    def __init__(self, folder: Path) -> None:
        """`folder`: the run's `rollouts` folder (`rollouts_dir`)."""
        super().__init__(RolloutStore(), new_session_dir(), None)
        self.variants: dict[str, RecordedVariant] = {}
        self.training = open_prime_rl(folder)
        name = (folder.parent if folder.name == ROLLOUTS else folder).name
        self.readonly_reason = f"an offline view of the training run {name}: nothing is running"
        numbers: dict[str, TaskNumbers] = {}
        for stepped in self.training.episodes:
            if stepped.kind not in self.variants:
                self.variants[stepped.kind] = RecordedVariant(stepped.kind)
                self.variants[stepped.kind].state = VariantState.DONE
            load_episode(self.store, stepped.kind, numbers.setdefault(stepped.kind, TaskNumbers()), stepped.episode, stepped.step)
        if not self.training.episodes:
            empty = self.variants["train"] = RecordedVariant("train")
            empty.state = VariantState.DONE
            empty.reason = f"no episodes: {folder} holds none yet"
            self.readonly_reason = f"an offline view of {name}: {empty.reason}"

    @property
    def truncated(self) -> str | None:
        return skipped_note(self.training.rollouts_dir, self.training.skipped)


class OpenedRecording(Session):
    """A recording browsed offline. The index lists every rollout with its outcome; a
    rollout's records are read and applied only when it is selected, so a recording
    far larger than memory opens in about the time one pass takes. Opened for the
    screen (`at_once` false), the pass reads on in slices on the app's loop after
    `start`: rows join as it reads, and a rollout selected before all its records are
    indexed shows what is, and fills in."""

    offline = True

    def __init__(self, path: Path, at_once: bool = True) -> None:
        self.clock = ReplayClock()
        super().__init__(RolloutStore(clock=self.clock), new_session_dir(), path)
        self.variants: dict[str, RecordedVariant] = {}
        self.index = RecordingIndex.begin(path)
        self.readonly_reason = f"a recording opened offline ({path.name}): nothing is running"
        self.loaded: set[str] = set()
        self._applied: dict[str, int] = {}
        """How many of a loaded rollout's records are in the store."""
        self._events = 0
        if at_once:
            self._show(self.index.read_on())
        self._say_partial()

    @property
    def truncated(self) -> str | None:
        return self.index.truncated

    async def start(self) -> None:
        await super().start()
        if not self.index.done:
            self._read_on_the_loop(self._read_on())

    async def shutdown(self, on_progress: Callable[[str], None] = lambda _: None) -> None:
        await self._stop_reading()
        await super().shutdown(on_progress)

    async def _read_on(self) -> None:
        """The index read a slice at a time, the loop handed back between slices so
        keys and ticks go on; each slice's rollouts shown as it ends. A slice reads a
        step at least: one begun after the box held the loop past its end reads on."""
        touched: dict[str, None] = {}
        shown = -SHOW_EVERY
        while not self.index.done:
            ends = time.perf_counter() + SLICE_SECONDS
            touched.update(self.index.read_on(SLICE_STEP))
            while not self.index.done and time.perf_counter() < ends:
                touched.update(self.index.read_on(SLICE_STEP))
            if self.index.done or time.perf_counter() - shown >= SHOW_EVERY:
                self._show(touched)
                self._say_partial()
                touched, shown = {}, time.perf_counter()
            await asyncio.sleep(0)

    def _say_partial(self) -> None:
        self.store.partial = None if self.index.done else f"indexing {self.index.fraction:.0%}"

    def _show(self, touched: Iterable[str]) -> None:
        """What the index has read of these rollouts, into the store: a loaded one's new
        records applied, any other's row from its summary."""
        events = self.index.events
        for event in events[self._events :]:
            apply_record(self.store, self.variants, event)
        self._events = len(events)
        for key in touched:
            summary = self.index.rollouts[key]
            if key not in self.store.rollouts:
                self._add(key, summary)
            if key in self.loaded:
                self._apply_new(key)
            else:
                self._summarize(key, summary)
            self.clock.now = max(self.clock.now, summary.last_t or 0.0)

    def _add(self, key: str, summary: RolloutSummary) -> None:
        announce = summary.announce or {}
        variant = str(announce.get("variant") or key.partition("/")[0])
        self.variants.setdefault(variant, RecordedVariant(variant))
        self.store.add_rollout(
            variant, announce.get("task_index", 0), announce.get("task_data") or {},
            announce.get("rollout_index", 0), key=key, run=run_of(announce), t=summary.first_t,
            task_key=recorded_task_key(announce),
        )

    def _summarize(self, key: str, summary: RolloutSummary) -> None:
        rollout = self.store.rollouts[key]
        if rollout.status.finished and (summary.ending is None or rollout.ended_at != summary.ended_t):
            rollout = self.store.reset_rollout(key)  # run again after the ending shown
        rollout.facts = summary.facts
        rollout.started_at = summary.started_t
        rollout.running_since = summary.running_t
        rollout.last_delta_at = summary.last_t if summary.deltas else None  # idle since it last spoke
        if summary.ending is not None:
            self.store.ended(key, summary.ending, t=summary.ended_t)
        else:
            self.store.restore(key, summary.status)

    def load(self, key: str) -> None:
        if key in self.loaded or key not in self.index.rollouts:
            return
        self.loaded.add(key)
        self.store.reset_rollout(key)
        self._apply_new(key)

    def _apply_new(self, key: str) -> None:
        """A loaded rollout's records the store does not hold yet, applied."""
        first = self._applied.get(key, 0)
        self._applied[key] = self.index.rollouts[key].records
        for record in self.index.load(key, first):
            if record.get("k") != "rollout":
                apply_record(self.store, self.variants, record)
