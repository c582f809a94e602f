"""A prime-rl run followed as a whole: live traces, finished episodes, annotations,
metrics and the eval plan, joined by trace id.

`PrimeRlRun.poll` advances every reader within a time slice (a session calls it on
its asyncio loop every few hundred milliseconds; `more` says to call again soon) and
joins what they read:

- a live trace whose episode's record has landed gets the row (`LiveTrace.row`), and
  the row gets the trace's dispatch step and task; prime-rl deletes the live file about
  when the record lands, before or after, so a trace is at every moment exactly one of
  live, landing (its file vanished, its row not read yet), or finished (`where`); a
  trace landing for `LANDING_SECONDS` since its file vanished, with the index read to
  its end, never landed
  (a retry discarded it, its episode was cancelled or failed, a relaunch cleared the
  live folder): it is `lost`, at once when its episode landed without it;
- rows get `effective`, `ship_step` and the trace advantage of their traces from the
  annotations, whichever of the two was read first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracewatch.core.recordings.prime_rl.annotations import Annotations, fold_updates
from tracewatch.core.recordings.prime_rl.chunks import RecordUnreadable, read_record
from tracewatch.core.recordings.prime_rl.columns import MISSING
from tracewatch.core.recordings.prime_rl.episodes import STEP_UNKNOWN, EpisodeIndex, EpisodeTable
from tracewatch.core.recordings.prime_rl.layout import StreamRun
from tracewatch.core.recordings.prime_rl.live import LiveChanges, LiveFollower, LiveTrace
from tracewatch.core.recordings.prime_rl.metrics import MetricsReader
from tracewatch.core.recordings.prime_rl.plan import EvalPlan, EvalProgress
from tracewatch.core.recordings.prime_rl.steps import StepScan, fill_from_record

LANDING_SECONDS = 15.0
"""How long a vanished live trace waits for its record (prime-rl's dashboard: 15 s)."""
SLICE_SECONDS = 0.02
"""A poll's default time: what the app's loop is held at most, about."""
PIECE = 256 << 10
"""Bytes a reader parses between looks at the clock (`episodes.READ_BYTES`)."""


@dataclass
class RunChanges:
    """What one `poll` brought."""

    live: LiveChanges
    rows: range
    """Finished rows added (the table's row numbers)."""
    landed: list[tuple[str, int]] = field(default_factory=list)
    """(trace id, row): a trace seen live whose finished row is now known."""
    lost: list[LiveTrace] = field(default_factory=list)
    """Live traces that vanished and never landed: their episode landed without them (a
    retry discarded them), or `LANDING_SECONDS` passed."""
    landed_traces: list[LiveTrace] = field(default_factory=list)
    annotated: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Rows whose effective, ship step or advantage may have changed."""
    metrics: int = 0
    """Metric rows added."""
    plan: bool = False
    """The eval plan changed."""
    restarted: bool = False
    """The index was replaced: `run.table` is a new table, read from the start."""
    more: bool = False
    """A reader stopped at the slice's end: poll again soon."""


@dataclass(frozen=True)
class Where:
    """Where a trace id is: live (still streaming, or its file lingering after its row
    landed), landing, finished, or unknown (all None / `MISSING`)."""

    live: LiveTrace | None
    landing: LiveTrace | None
    row: int


@dataclass
class OpenedEpisode:
    row: int
    record: dict[str, Any]
    """The record as prime-rl wrote it (`Episode.to_record()`), each trace with its
    annotations folded (info merged, streams placed on its nodes)."""
    problems: list[str]
    """Annotations that could not be read, in words."""
    step: int | None
    """The dispatch step the record holds (`info.dispatch.step`, else `run.work.step`)."""
    task: str | None


class PrimeRlRun:
    """Every reader of a stream-layout run, and their joins."""

    def __init__(self, layout: StreamRun, clock: Callable[[], float] = time.monotonic, landing_seconds: float = LANDING_SECONDS) -> None:
        self.layout = layout
        self.clock = clock
        self.landing_seconds = landing_seconds
        self.live = LiveFollower(layout.live, layout.pending)
        self.index = EpisodeIndex(layout.index)
        self.annotations = Annotations(layout.annotations)
        self.metrics = MetricsReader(layout.metrics)
        self.plan = EvalPlan(layout.plan)
        self.step_scan = StepScan(layout.stream)
        self.landing: dict[str, tuple[LiveTrace, float]] = {}
        """Vanished live traces waiting for their row, with when they vanished."""

    @property
    def table(self) -> EpisodeTable:
        return self.index.table

    def poll(self, slice_seconds: float = SLICE_SECONDS) -> RunChanges:
        """Advance every reader for about `slice_seconds` (each at least one piece)."""
        ends = self.clock() + slice_seconds
        known = set(self.live.traces)
        generation = self.index.generation
        live = self.live.poll(PIECE)
        start = len(self.table)
        changes = RunChanges(live, range(start, start))
        annotated = [self.annotations.read_on(PIECE)]
        rows = self.index.read_on(PIECE)
        changes.metrics = self.metrics.read_on(PIECE)
        while self.clock() < ends and (live.more or not self._caught_up()):
            if live.more:
                live.merge(self.live.poll(PIECE))
            if not self.index.caught_up:
                rows = range(rows.start, self.index.read_on(PIECE).stop)
            if not self.annotations.caught_up:
                annotated.append(self.annotations.read_on(PIECE))
            if not self.metrics.caught_up:
                changes.metrics += self.metrics.read_on(PIECE)
        changes.restarted = self.index.generation != generation
        if changes.restarted:
            rows = range(0, len(self.table))
            for trace in self.live.traces.values():
                trace.row = -1  # a row of the old table: joined again below
        changes.rows = rows
        changes.more = live.more or not self._caught_up()
        changes.plan = self.plan.refresh()
        self._join_live(changes, known)
        changes.annotated = self._annotate(rows, np.unique(np.concatenate(annotated)))
        return changes

    def _caught_up(self) -> bool:
        return self.index.caught_up and self.annotations.caught_up and self.metrics.caught_up

    def where(self, trace_id: str) -> Where:
        """Where `trace_id` is now (see `Where`): live, landing, finished, or unknown."""
        live = self.live.traces.get(trace_id)
        landing = self.landing.get(trace_id, (None, 0.0))[0]
        row = live.row if live is not None and live.row >= 0 else MISSING
        if row < 0 and landing is None:
            row = self.table.find_traces([trace_id])[0]
        return Where(live, landing, row)

    def _join_live(self, changes: RunChanges, known: set[str]) -> None:
        now = self.clock()
        for gone in changes.live.vanished:
            if gone.row < 0:  # folded or not (a file can come and go between two polls' reads)
                # a relaunch's cleared traces too: one that landed as the folder went can
                # be a line behind in the index, and taken for lost it would land as a second row
                self.landing[gone.trace_id] = (gone, now)
        if changes.rows or changes.restarted:
            candidates = [t for t in self.live.traces.values() if t.row < 0] + [t for t, _ in self.landing.values()]
        else:
            candidates = [t for t in changes.live.changed if t.trace_id not in known and t.row < 0]
        if candidates:
            rows = self.table.find_traces([t.trace_id for t in candidates])
            for trace, row in zip(candidates, rows):
                if row >= 0:
                    self._landed(trace, row, changes)
        attempts = {t.dispatch.id for t in changes.landed_traces if t.dispatch is not None and t.dispatch.id}
        for trace_id, (trace, since) in list(self.landing.items()):
            retried = trace.dispatch is not None and trace.dispatch.id in attempts
            if retried or self.index.caught_up and now - since > self.landing_seconds:
                del self.landing[trace_id]
                changes.lost.append(trace)

    def _landed(self, trace: LiveTrace, row: int, changes: RunChanges) -> None:
        trace.row = row
        self.landing.pop(trace.trace_id, None)
        changes.landed.append((trace.trace_id, row))
        changes.landed_traces.append(trace)
        dispatch = trace.dispatch
        if dispatch is not None:
            if dispatch.step is not None and -(1 << 31) < dispatch.step < 1 << 31:
                self.table.column("dispatch_step")[row] = dispatch.step
            if dispatch.task is not None:
                self.table.set_task(row, dispatch.task)

    def _annotate(self, rows: range, slots: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Carry the annotation scalars onto the rows just read and onto the rows of the
        traces just annotated; the rows touched."""
        table = self.table
        touched = [np.arange(rows.start, rows.stop, dtype=np.int64)] if len(self.annotations) else []
        if len(slots) and len(table):
            positions = table.trace_ids.locate(self.annotations.traces, slots)
            touched.append(table.row_of_trace_position(positions[positions >= 0]))
        if not touched:
            return np.zeros(0, dtype=np.int64)
        affected = np.unique(np.concatenate(touched))
        self._rescore(affected)
        return affected

    def _rescore(self, rows: np.ndarray[Any, Any]) -> None:
        table, notes = self.table, self.annotations
        if not len(rows):
            return
        starts = table.trace_start[rows]
        following = rows + 1
        ends = np.where(following < len(table), table.trace_start[np.minimum(following, len(table) - 1)], len(table.trace_ids))
        single = ends - starts == 1
        one = rows[single]
        slots = notes.traces.locate(table.trace_ids, starts[single])
        known = slots >= 0
        one, slots = one[known], slots[known]
        effective, step, advantage = (notes.column(name)[slots] for name in ("effective", "ship_step", "advantage"))
        table.column("effective")[one] = effective
        table.column("ship_step")[one] = step
        has = ~np.isnan(advantage)
        table.column("advantage")[one[has]] = advantage[has]
        for row in rows[~single & (ends > starts)].tolist():
            self._rescore_many(row)

    def _rescore_many(self, row: int) -> None:
        """A row of several traces: effective if any is, the earliest ship step, the
        mean of the traces' advantages."""
        notes = self.annotations
        slots = [slot for slot in notes.slots_of(self.table.traces_of(row)) if slot >= 0]
        if not slots:
            return
        effective = notes.column("effective")[slots]
        steps = notes.column("ship_step")[slots]
        advantages = notes.column("advantage")[slots]
        self.table.column("effective")[row] = effective.max()
        self.table.column("ship_step")[row] = steps[steps >= 0].min() if (steps >= 0).any() else MISSING
        if not np.isnan(advantages).all():
            self.table.column("advantage")[row] = np.nanmean(advantages)

    def open_episode(self, row: int) -> OpenedEpisode:
        """Row `row`'s record, read from its chunk (plain or sealed), with its traces'
        annotations folded; `RecordUnreadable` says why it cannot be read."""
        table = self.table
        if not 0 <= row < len(table):
            raise RecordUnreadable(f"there is no finished episode {row} (the run has {len(table)})")
        chunk, offset = int(table.column("chunk")[row]), int(table.column("offset")[row])
        record = read_record(self.layout.stream, chunk, offset)
        wanted = table.episode_id(row)
        if wanted is not None and record.get("id") != wanted:
            raise RecordUnreadable(f"chunk {chunk}, offset {offset} holds episode {str(record.get('id'))[:40]!r}, not {wanted!r}")
        problems: list[str] = []
        traces = record.get("traces")
        for trace in traces if type(traces) is list else ():
            if type(trace) is dict and type(trace.get("id")) is str:
                updates, unread = self.annotations.updates_for(trace["id"])
                fold_updates(trace, updates)
                problems += unread
        step, task = fill_from_record(table, row, record)
        return OpenedEpisode(row, record, problems, step, task)

    def scan_steps(self, max_rows: int = 256, kind: str | None = "eval") -> int:
        """Read the records of up to `max_rows` of the newest finished rows (of `kind`)
        whose step is not known, for their step and task (`steps.StepScan`); the rows
        that got one. A session calls it when the readers are caught up."""
        return self.step_scan.fill(self.table, max_rows, kind)

    def eval_progress(self) -> list[EvalProgress]:
        """Each planned (env, eval step), with what the run shows of it."""
        table, found = self.table, []
        eval_code = table.code("kind", "eval")
        steps, source = table.steps()
        flights: dict[tuple[str | None, int | None], set[object]] = {}
        dispatches = [t.dispatch for t in self.live.traces.values() if t.row < 0]
        dispatches += [t.dispatch for t, _ in self.landing.values()]
        dispatches += [p.dispatch for p in self.live.visible_placeholders()]
        for dispatch in dispatches:
            if dispatch is not None and dispatch.kind == "eval":
                # an episode, not a trace: its traces and attempts share the dispatch id
                flights.setdefault((dispatch.env, dispatch.step), set()).add(dispatch.id or object())
        for env, planned in sorted(self.plan.expected.items()):
            ours = (table.column("kind") == eval_code) & (table.column("env") == table.code("env", env))
            unknown = int((ours & (source == STEP_UNKNOWN)).sum())
            for step, expected in sorted(planned.items()):
                done = int((ours & (steps == step) & (source != STEP_UNKNOWN)).sum())
                found.append(EvalProgress(env, step, expected, done, len(flights.get((env, step), ())), unknown))
        return found
