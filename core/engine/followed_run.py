"""A prime-rl run in the stream layout (`monitors/file/`), followed while it writes:
its in-flight traces turn by turn, its queued episodes, and every finished episode,
in the store the app and the headless runner read (docs/prime-rl.md).

One rollout is one dispatched episode, keyed by its dispatch id (a trace's own id
where the orchestrator gave none): a placeholder queues it, its trace's deltas run it
(a retry's new trace takes the same row over), and when its record lands it ends with
the index's word on it, so a live row becomes its finished row, never a second one. A
finished episode never seen live joins as a row of its index facts alone; its record
is read from its chunk only when it is opened (`load`). On screen (`columns`), such
rows stay rows of the run's columns (`RunRows`, the store's `finished`) until one is
opened: a million of them are arrays, not a million rollouts.

The live rows are folded by the store (`LiveFollower.fold`): it applies each delta,
as from every source, into the follower's own assembly of the file, so a trace is
folded once.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tracewatch.core.engine.coded_task_numbers import CodedTaskNumbers
from tracewatch.core.engine.run_rows import RunRows, variant_name
from tracewatch.core.paths import new_session_dir
from tracewatch.core.recordings.apply_records import RecordedVariant
from tracewatch.core.recordings.load_episodes import trace_as_delta
from tracewatch.core.recordings.prime_rl.chunks import RecordUnreadable
from tracewatch.core.recordings.prime_rl.episodes import STEP_UNKNOWN
from tracewatch.core.recordings.prime_rl.layout import StreamRun
from tracewatch.core.recordings.prime_rl.live import Dispatch, LiveTrace, Placeholder
from tracewatch.core.recordings.prime_rl.metrics import Series
from tracewatch.core.recordings.prime_rl.plan import EvalProgress
from tracewatch.core.recordings.prime_rl.run import PrimeRlRun, RunChanges
from tracewatch.core.run.series import Ended
from tracewatch.core.session.contracts import RunMetrics, VariantState
from tracewatch.core.session.finished_columns import NAMED, UNLABELLED, failed_reason, labelled_tasks
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.session import Session
from tracewatch.core.session.status import Ending, Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.trace_state import RolloutFacts
from tracewatch.core.wire.assembly import AssemblyError, EpisodeAssembly
from tracewatch.core.wire.protocol import WireDelta

POLL_SECONDS = 0.25
"""Between polls of a run that is caught up (prime-rl's dashboard polls every 0.5-2 s)."""
SCAN_ROWS = 4096
"""Records read for their task and step a call, reading a run whole."""
SCAN_SLICE = 64
"""Records read for their step a call while following: what holds the loop a moment."""
USER_PAUSE = 1.0
"""Seconds after the user's last key the reading of steps waits: an episode opened
or a keystroke does not share the loop with it."""
UNOBSERVED = "the viewer stopped following; the run goes on"


class FollowedRun(Session):
    """A stream-layout prime-rl run, followed until quit (`follow`), or read to where it
    is now and left there; with `until_idle`, the following ends once nothing changed
    for that many seconds."""

    def __init__(self, layout: StreamRun, follow: bool = True, until_idle: float | None = None, columns: bool = False) -> None:
        super().__init__(RolloutStore(), new_session_dir(), None)
        self.layout = layout
        self.follow = follow
        self.until_idle = until_idle
        self.run = PrimeRlRun(layout)
        self.run.live.fold = self._fold
        self.variants: dict[str, RecordedVariant] = {}
        name = (layout.traces.parent.parent.parent if layout.monitor is not None and layout.monitor.name == "file" else layout.traces.parent).name
        self.readonly_reason = f"following the prime-rl run {name}: tracewatch only watches it"
        self._numbers: dict[str, CodedTaskNumbers] = {}
        self._by_trace: dict[str, str] = {}
        """Trace id -> the key of its episode's rollout, for every trace seen live."""
        self._assemblies: dict[str, EpisodeAssembly] = {}
        """A live rollout's key -> the follower's assembly its rows are derived from."""
        self._by_row: dict[int, str] = {}
        self._row_of: dict[str, int] = {}
        self._loaded: set[str] = set()
        self._rows_deferred = False
        self.problem: str | None = None
        """Why an episode opened could not be read, the latest."""
        self.metrics_version = 0
        self._metrics_generation = 0
        self._user_until = 0.0
        """Until when the reading of steps waits for the user (`user_busy`)."""
        self.rows: RunRows | None = None
        """The finished rows no rollout stands for, as columns (`columns`)."""
        if columns:
            self.rows = self.store.finished_rows = RunRows(self.run.table, lambda name: self._numbers[self._variant(name)], self._row_of)

    # -- the session -------------------------------------------------------------------

    def user_busy(self) -> None:
        self._user_until = time.monotonic() + USER_PAUSE

    async def start(self) -> None:
        await super().start()
        self._read_on_the_loop(self._follow())

    async def shutdown(self, on_progress: Callable[[str], None] = lambda _: None) -> None:
        await self._stop_reading()
        self._settle()
        await super().shutdown(on_progress)

    def snapshot(self) -> FollowedRun:
        """Read the run to where it is now, at once (the offline commands and
        `--no-follow`), every finished episode with its task and step: the records of
        those never seen live are read for them (`PrimeRlRun.scan_steps`) before their
        rows are made, so `compare` tells their tasks apart."""
        self._rows_deferred = True
        while True:
            changes = self.run.poll(slice_seconds=1.0)
            self._apply(changes)
            if not changes.more:
                break
        for _ in range(len(self.run.table) // SCAN_ROWS + 1):  # bounded: a record's negative step leaves its row wanting
            if not self.run.scan_steps(max_rows=SCAN_ROWS, kind=None):
                break
        self._rows_deferred = False
        self._add_rows(range(len(self.run.table)))
        self._settle()
        return self

    def records(self) -> Iterator[tuple[str, dict[str, Any] | None, str | None]]:
        """Each finished episode's record as it landed, its annotations folded in, read
        one at a time: (its row's key, the record, or why it cannot be read)."""
        for row in range(len(self.run.table)):
            key = self._by_row.get(row) or (self.rows.key(row) if self.rows is not None else f"row {row}")
            try:
                yield key, self.run.open_episode(row).record, None
            except RecordUnreadable as error:
                yield key, None, str(error)

    async def _follow(self) -> None:
        quiet_since = time.monotonic()
        while True:
            changes = self.run.poll()
            if self._apply(changes):
                quiet_since = time.monotonic()
            if changes.more:
                await asyncio.sleep(0)
                continue
            if (waiting := self._user_until - time.monotonic()) > 0:  # the user first; polls go on meanwhile
                await asyncio.sleep(min(POLL_SECONDS, waiting))
                continue
            if self._scan_steps():
                await asyncio.sleep(0)
                continue
            if not self.follow or self.until_idle is not None and time.monotonic() - quiet_since >= self.until_idle:
                break
            await asyncio.sleep(POLL_SECONDS)
        self._settle()

    def _scan_steps(self) -> bool:
        """Caught up: the steps of a few finished rows never seen live, read from their
        records (`PrimeRlRun.scan_steps`, a bounded number a call, so the loop is held
        briefly), onto their rows' Step; whether some were found."""
        table = self.run.table
        if not (table.column("dispatch_step") < 0).any():
            return False
        filled = self.run.scan_steps(max_rows=SCAN_SLICE, kind=None)
        learnt = np.array(self.run.step_scan.learnt, dtype=np.int64)  # the rows read: a call weighs these, not every row
        if self.rows is not None and len(learnt):  # the table sees its rows change (a step, or a task alone); no count moves
            self.rows.changed(learnt)
        if not filled:
            return False
        steps = table.column("dispatch_step")[learnt]
        found = steps >= 0  # a record's negative step is counted filled, and stays unknown
        if self.rows is not None and found.any():
            self.store.steps_known = True
        for row, step in zip(learnt[found].tolist(), steps[found].tolist(), strict=True):
            key = self._by_row.get(row)
            rollout = self.store.rollouts.get(key) if key is not None else None
            if rollout is not None and rollout.step != step:  # the dispatch step wins over the shipping step
                rollout.step = step
                self.store.steps_known = True
                self.store.touch_rollout(rollout.key)
        if found.any() and self.run.plan.expected:  # the plan's counts take the steps found
            self.metrics_version += 1
        return bool(found.any())

    def _settle(self) -> None:
        """Following ended: what still runs goes on without the viewer."""
        for key in list(self.store.rollouts):
            if not self.store.rollouts[key].status.finished:
                self.store.unobserved(key, UNOBSERVED)
        for variant in self.variants.values():
            if variant.state is not VariantState.DONE:
                variant.state = VariantState.DONE
                self.store.touch_variant(variant.name)

    # -- what a poll brought -----------------------------------------------------------

    def _apply(self, changes: RunChanges) -> bool:
        """Changes into the store; whether anything changed."""
        if changes.restarted:  # the index was replaced: every row is read again (and landed again)
            self._by_row.clear()
            self._row_of.clear()
            for numbers in self._numbers.values():
                numbers.forget_labels()
            if self.rows is not None:
                self.rows.reset(self.run.table)
        for placeholder in changes.live.placed:
            self._queue(placeholder)
        for trace_id, row in changes.landed:
            self._land(trace_id, row)
        if self.rows is not None and changes.landed:  # a landing gives its row the live dispatch's step and task
            self.rows.changed(np.array([row for _, row in changes.landed if row < self.rows.count], dtype=np.int64))
        for trace in changes.lost:
            self._lose(trace)
        for trace in changes.live.changed:
            if trace.error is not None and (key := self._by_trace.get(trace.trace_id)) is not None:
                self.store.failed(key, f"its live file cannot be followed: {trace.error}")
        if not self._rows_deferred:
            self._add_rows(changes.rows)
        for row in changes.annotated.tolist():
            if (key := self._by_row.get(row)) is not None:
                self._mark_used(key, row)
        self._metrics_moved(changes)
        if self.rows is not None and len(changes.annotated):  # the table sees its rows change; no count moves
            self.rows.changed(changes.annotated.astype(np.int64))
        return bool(changes.live or changes.rows or changes.landed or changes.lost or len(changes.annotated) or changes.metrics)

    def _variant(self, name: str) -> str:
        if name not in self.variants:
            variant = self.variants[name] = RecordedVariant(name)
            variant.state = VariantState.RUNNING if self.follow else VariantState.DONE
            self._numbers[name] = CodedTaskNumbers()
            self.store.add_variant(name)
        return name

    def _add(self, key: str, dispatch: Dispatch | None, t: float | None) -> Rollout:
        variant = self._variant(variant_name(dispatch.kind if dispatch else None, dispatch.env if dispatch else None))
        numbers = self._numbers[variant]
        if dispatch is not None and dispatch.task:
            data = {"name": dispatch.task}
            task_index, rollout_index = numbers.of(NAMED, self.run.table.task_code(dispatch.task))
        else:
            data, (task_index, rollout_index) = {}, numbers.of(UNLABELLED, 0)
        step = dispatch.step if dispatch is not None else None
        return self.store.add_rollout(variant, task_index, data, rollout_index, key=key, t=t, step=step)

    def _queue(self, placeholder: Placeholder) -> None:
        key = self._key(placeholder.dispatch, placeholder.dispatch_id)
        if key not in self.store.rollouts:
            dispatch = placeholder.dispatch
            self._add(key, dispatch, dispatch.started if dispatch else None)

    def _key(self, dispatch: Dispatch | None, fallback: str) -> str:
        variant = variant_name(dispatch.kind if dispatch else None, dispatch.env if dispatch else None)
        return f"{variant}/{dispatch.id if dispatch is not None and dispatch.id else fallback}"

    def _fold(self, trace: LiveTrace, assembly: EpisodeAssembly, delta: WireDelta) -> dict[str, Any]:
        """A delta the follower read, folded into its file's `assembly` by the store:
        its rollout runs from its dispatch's start."""
        key = self._by_trace.get(trace.trace_id)
        if key is None:
            key = self._by_trace[trace.trace_id] = self._key(trace.dispatch, trace.trace_id)
        store = self.store
        rollout = store.rollouts.get(key)
        if rollout is None:
            started = trace.dispatch.started if trace.dispatch else None
            rollout = self._add(key, trace.dispatch, started)
        if key in self._row_of:
            return assembly.apply(delta)  # it landed before its file stopped growing: the row is the record's
        if self._assemblies.get(key) is not assembly:  # its first trace, a retry's, or its file folded again
            rollout = store.reset_rollout(key) if key in self._assemblies else rollout
            rollout.fold_into(assembly)
            self._assemblies[key] = assembly
            started = trace.dispatch.started if trace.dispatch and trace.dispatch.started else None
            store.started(key, trace.trace_id, started)
            if started is not None:
                store.running_from(key, started)
        return store.apply_delta(key, delta)

    def _land(self, trace_id: str, row: int) -> None:
        key = self._by_trace.get(trace_id)
        if key is None or key not in self.store.rollouts:
            return  # seen listed, never folded: it joins as a new row
        self._by_row[row] = key
        self._row_of[key] = row
        if self.rows is not None and row < self.rows.count and not self.rows.has_rollout()[row]:
            self._count_rows(np.array([row], dtype=np.int64), -1)  # counted as a row of the columns: its rollout counts it now
            self.rows.set_has_rollout(row)
        self._assemblies.pop(key, None)
        self._as_finished(key, row)
        self._end(key, row)

    def _as_finished(self, key: str, row: int) -> None:
        """The row reads the index from now on, as a row never seen live does: the live
        file may have vanished before its last deltas were read, and the record is what
        landed. Its traces leave memory until it is opened."""
        rollout = self.store.rollouts[key]
        rollout.unload()
        rollout.facts = self._facts(row)
        self._mark_used(key, row)
        self.store.touch_rollout(key)

    def _lose(self, trace: LiveTrace) -> None:
        key = self._by_trace.pop(trace.trace_id, None)
        if key is None or key not in self.store.rollouts or key in self._row_of:
            return
        rollout = self.store.rollouts[key]
        if rollout.status.finished or rollout.primary is not None and rollout.primary.id != trace.trace_id:
            return  # a retry's trace runs it now
        self._assemblies.pop(key, None)
        self.store.failed(key, "its trace vanished and no record of it landed (discarded, or its episode was cancelled)")

    def _end(self, key: str, row: int) -> None:
        """The row's ending as the index says: ok, else failed with its errors counted."""
        table = self.run.table
        ok = int(table.column("ok")[row])
        errors = int(table.column("num_errors")[row])
        arrival = float(table.column("arrival")[row])
        t = arrival if not math.isnan(arrival) else None
        if ok == 0:
            self.store.ended(key, Ending(Status.FAILED, failed_reason(errors)), t=t)
        else:
            self.store.ended(key, Ending(Status.DONE), t=t)

    def _add_rows(self, rows: range) -> None:
        """Finished episodes never seen live, each a row of its index facts (on
        screen, a row of the columns: `RunRows`)."""
        if not rows:
            return
        table = self.run.table
        if self.rows is not None:
            start = self.rows.count
            variants = self.rows.extend(rows.stop)
            self._count_rows(np.arange(start, self.rows.count, dtype=np.int64), 1)
            self.store.steps_known = self.store.steps_known or bool((self.rows.column("step") >= 0).any())
            self.store.touch_finished(variants)
            return
        steps, source = table.steps()
        which, codes = labelled_tasks(table.column("task")[rows.start : rows.stop], table.column("group")[rows.start : rows.stop])
        for row in rows:
            if row in self._by_row:
                continue
            episode = table.episode_id(row) or f"row-{row}"
            kind, env = table.text("kind", row), table.text("env", row)
            key = f"{variant_name(kind, env)}/{episode}"
            if key in self.store.rollouts:
                self._by_row[row], self._row_of[key] = key, row
                continue
            variant = self._variant(variant_name(kind, env))
            task, group = table.text("task", row), table.text("group", row)
            data = {"name": task} if task else {"group": group} if group else {}
            task_index, rollout_index = self._numbers[variant].of(int(which[row - rows.start]), int(codes[row - rows.start]))
            step = int(steps[row]) if source[row] != STEP_UNKNOWN else None
            dispatch = float(table.column("dispatch")[row])
            rollout = self.store.add_rollout(variant, task_index, data, rollout_index, key=key, t=None if math.isnan(dispatch) else dispatch, step=step)
            rollout.facts = self._facts(row)
            self._by_row[row], self._row_of[key] = key, row
            self._mark_used(key, row)
            self.store.started(key, episode, rollout.created_at)
            self._end(key, row)

    def _mark_used(self, key: str, row: int) -> None:
        """Whether the trainer used it, as the orchestrator's annotations say."""
        effective = int(self.run.table.column("effective")[row])
        used = None if effective < 0 else effective > 0
        rollout = self.store.rollouts[key]
        if rollout.used != used:
            rollout.used = used
            self.store.touch_rollout(key)

    def _facts(self, row: int) -> RolloutFacts:
        table = self.run.table
        reward = float(table.column("reward")[row])
        tokens = [int(table.column(name)[row]) for name in ("input_tokens", "output_tokens")]
        errors = int(table.column("num_errors")[row])
        return RolloutFacts(
            phase="done" if int(table.column("ok")[row]) != 0 else "error",
            turns=max(0, int(table.column("turns")[row])),
            tokens=sum(count for count in tokens if count >= 0) if max(tokens) >= 0 else None,
            reward=None if math.isnan(reward) else reward,
            scored_traces=0 if math.isnan(reward) else 1,
            errors=max(0, errors),
            trace_ids=tuple(table.traces_of(row)),
        )

    # -- the run's own metrics (`RunMetrics`) --------------------------------------------

    def _metrics_moved(self, changes: RunChanges) -> None:
        """The version the Trends tab redraws on: metric rows came (or the file started
        over), the plan changed, or, with a plan, the episodes it counts moved."""
        generation = self.run.metrics.generation
        progress = bool(self.run.plan.expected) and bool(changes.live or changes.rows or changes.landed or changes.lost)
        if changes.metrics or changes.plan or progress or generation != self._metrics_generation:
            self._metrics_generation = generation
            self.metrics_version += 1

    @property
    def run_metrics(self) -> RunMetrics:
        return self

    @property
    def metric_keys(self) -> list[str]:
        return self.run.metrics.keys

    @property
    def metric_producers(self) -> list[str | None]:
        return self.run.metrics.producers

    @property
    def metrics_skipped(self) -> str | None:
        skipped = self.run.metrics.skipped
        return f"{skipped.count} line(s) skipped, the first: {skipped.first[0]}" if skipped.count and skipped.first else None

    def metric_stamp(self, key: str) -> tuple[int, int]:
        return self.run.metrics.generation, self.run.metrics.count(key)

    def metric_points(self, key: str) -> Series | None:
        return self.run.metrics.series(key)

    def eval_lines(self) -> Sequence[EvalProgress]:
        return self.run.eval_progress()

    # -- an episode opened -------------------------------------------------------------

    def load(self, key: str) -> None:
        """A finished episode's record, read from its chunk, annotations folded in, into
        its rollout (once)."""
        if self.rows is not None and key not in self.store.rollouts and (found := self.rows.row_of(key)) is not None:
            self._make_rollout(key, found)
        row = self._row_of.get(key)
        if row is None or key in self._loaded:
            return
        self._loaded.add(key)
        try:
            opened = self.run.open_episode(row)
        except RecordUnreadable as error:
            self.store.rollouts[key].unavailable = str(error)
            self.problem = str(error)
            self.store.touch_rollout(key)
            return
        old = self.store.rollouts[key]
        store = self.store
        rollout = store.reset_rollout(key)
        if opened.step is not None and opened.step >= 0:  # the record's dispatch step: no scan will bring it now
            rollout.step, store.steps_known = opened.step, True
        store.started(key, old.request_id or key, old.started_at)
        record = opened.record
        traces = [trace for trace in record.get("traces") or () if type(trace) is dict and type(trace.get("id")) is str]
        try:
            for trace in traces:
                store.apply_delta(key, trace_as_delta(trace), old.started_at)
        except AssemblyError as error:
            store.failed(key, f"this episode cannot be shown: {error}", t=old.ended_at)
            return
        head = {name: value for name, value in record.items() if name != "traces"}
        summaries = [{"id": trace["id"], "nodes": len(trace.get("nodes") or ()), "calls": len(trace.get("calls") or ())} for trace in traces]
        store.ended(key, old.ending or Ending(Status.DONE), rollout.assembly.finish(head, summaries, partial=True), t=old.ended_at)

    def _make_rollout(self, key: str, row: int) -> None:
        """A finished row opened: a rollout stands for it from now on, numbered and
        labelled as its row was."""
        rows = self.rows
        assert rows is not None
        table = self.run.table
        variant = rows.labels("variant")[int(rows.column("variant")[row])]
        task, group = table.text("task", row), table.text("group", row)
        data = {"name": task} if task else {"group": group} if group else {}
        dispatch = float(table.column("dispatch")[row])
        step = int(rows.column("step")[row])
        self._count_rows(np.array([row], dtype=np.int64), -1)  # its rollout counts it from now on
        rollout = self.store.add_rollout(
            variant, int(rows.column("task_index")[row]), data, int(rows.column("number")[row]),
            key=key, t=None if math.isnan(dispatch) else dispatch, step=step if step >= 0 else None,
        )
        rollout.facts = self._facts(row)
        self._by_row[row], self._row_of[key] = key, row
        rows.set_has_rollout(row)
        self._mark_used(key, row)
        self.store.started(key, table.episode_id(row) or key, rollout.created_at)
        self._end(key, row)
        self.store.touch_finished([variant])

    def _count_rows(self, rows: np.ndarray[Any, Any], sign: int) -> None:
        """Rows of the columns (`rows`, those no rollout stands for) into the run's
        series, as the store counts a rollout that ended with no trace read (its wait
        from dispatch to arrival, its outcome), or taken back (`sign` -1)."""
        columns = self.rows
        assert columns is not None
        rows = rows[~columns.has_rollout()[rows]]
        table = self.run.table
        variants = columns.column("variant")[rows]
        for code in np.unique(variants).tolist():
            mine = rows[variants == code]
            ended = Ended(
                table.column("dispatch")[mine], table.column("arrival")[mine], table.column("ok")[mine] != 0,
                table.column("reward")[mine], np.maximum(columns.column("tokens")[mine], 0),
            )
            self.store.series.add_ended(columns.labels("variant")[code], ended, sign)

    def row_of(self, key: str) -> int | None:
        """The finished episode's row of a rollout, once it has one."""
        return self._row_of.get(key)

    @property
    def truncated(self) -> str | None:
        skipped = self.run.index.skipped
        notes = [f"{skipped.count} index line(s) skipped, the first: {skipped.first[0]}"] if skipped.count and skipped.first else []
        if self.problem:
            notes.append(self.problem)
        return "; ".join(notes) or None
