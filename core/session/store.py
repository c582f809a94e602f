"""The one source of truth the UI reads: every rollout of every variant, its live
traces, and what it derives from them (turns, phase, activity, tokens, reward).

Each delta is applied in time proportional to its own size. The store remembers which
rollouts, traces and variants changed since the UI last asked (`take_changes`), so a
tick redraws only those, however many deltas landed in between.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tracewatch.core.run.series import RunSeries
from tracewatch.core.session.contracts import FinishedRows
from tracewatch.core.session.phases import DURATION_KEYS, percentile, phase_durations
from tracewatch.core.session.rollout import Counts, Rollout
from tracewatch.core.session.stall_watch import StallWatch
from tracewatch.core.session.status import LIVE, Ending, Status, episode_ending
from tracewatch.core.session.tallies import SortedPhases, Tally
from tracewatch.core.session.trace_state import ERROR_WORDS_LIMIT, TraceState, add_error_words
from tracewatch.core.wire.protocol import WireDelta


@dataclass
class VariantStats:
    counts: dict[Status, int]
    """By status as shown: one sent but waiting for a slot is queued."""
    mean_reward: float | None
    scored: int
    phases: dict[str, tuple[float, float]]
    """Per phase (and model/harness), p50 and p95 seconds over finished rollouts."""
    flagged: dict[str, int] = field(default_factory=dict)
    """Per flag (`tracewatch.core.tokens.flags`), how many rollouts raise it."""


@dataclass
class Changes:
    rollouts: set[str] = field(default_factory=set)
    traces: set[tuple[str, str]] = field(default_factory=set)
    variants: set[str] = field(default_factory=set)
    added: list[str] = field(default_factory=list)
    """Rollout keys added since the last look, in order."""

    def __bool__(self) -> bool:
        return bool(self.rollouts or self.variants)


StallTest = Callable[["Rollout", float], bool]
"""Whether a rollout is stalled at `now` (`RolloutStore.is_stalled`)."""


class RolloutStore:
    def __init__(
        self, stall_seconds: float = 60.0, clock: Callable[[], float] = time.time, stall_by_variant: Mapping[str, float] | None = None
    ) -> None:
        self.stalls = StallWatch(stall_seconds, stall_by_variant)
        """Which live rollouts went silent, and each variant's threshold."""
        self.clock = clock
        self.rollouts: dict[str, Rollout] = {}
        self.variants: dict[str, list[str]] = {}
        self.steps_known = False
        """Some rollout has a training step: the table shows the Step column."""
        self._phases: dict[str, SortedPhases] = {}
        """Per variant, each done rollout's seconds per phase (`phase_durations`), by
        key: a rollout read again (an opened recording loads it) replaces its own."""
        self._tallies: dict[tuple[str, int | None], Tally] = {}
        """Per variant and per (variant, run), what `stats` counts, kept as rollouts
        change (`tracewatch.core.session.tallies`)."""
        self._counted: dict[str, Counts] = {}
        """Each rollout as the series and the tallies last counted it (`_changed`), by
        key: one started again in its place (`reset_rollout`) takes its old counts back."""
        self._changes = Changes()
        self.partial: str | None = None
        """Why the store holds only part of its source yet (an opened recording still
        being indexed), said wherever a figure sums over every rollout."""
        self.dropped_frames = 0
        """Frames a client could not use (the screen may then miss what they held)."""
        self.last_drop: str | None = None
        self._stats: dict[tuple[str, int | None], tuple[int, VariantStats]] = {}
        self._versions: dict[str, int] = {}
        """Per variant, bumped whenever a rollout's status, ending or record changes:
        `stats` is recomputed only then, not at every redraw of 100,000 rollouts."""
        self.version = 0
        """Bumped with any variant's version (a rollout added too): a view derived from
        which rollouts there are and how they ended looks again only when it moved."""
        self.series = RunSeries()
        """Waiting, running and outcomes over time per variant, counted as they change."""
        self.finished_rows: FinishedRows | None = None
        """Finished rows kept as columns, not rollouts (a followed prime-rl run's):
        the table draws them and `stats` counts them with the rollouts."""
        self._finished_tallies: tuple[int, dict[str, Tally]] | None = None
        self._finished_counted = 0
        """Bumped by `touch_finished`: the finished rows' tallies are counted again then."""

    def add_variant(self, name: str) -> None:
        if name not in self.variants:
            self.variants[name] = []
            self._phases[name] = SortedPhases()
            self._changes.variants.add(name)

    def add_rollout(
        self,
        variant: str,
        task_index: int,
        task_data: dict[str, Any],
        rollout_index: int = 0,
        key: str | None = None,
        run: int = 1,
        t: float | None = None,
        task_key: str | None = None,
        step: int | None = None,
    ) -> Rollout:
        """A rollout queued at `t` (now if None)."""
        self.add_variant(variant)
        key = key or f"{variant}/{len(self.variants[variant])}"
        rollout = Rollout(
            key, variant, task_index, task_data, rollout_index, run,
            created_at=self.clock() if t is None else t, task_key=task_key, step=step,
        )
        self.steps_known = self.steps_known or step is not None
        self.rollouts[key] = rollout
        self.variants[variant].append(key)
        self._changed(rollout)
        self._changes.added.append(key)
        return rollout

    def reset_rollout(self, key: str) -> Rollout:
        """A fresh rollout in the same place, for records about to be applied again
        from the start (a rollout loaded on demand)."""
        rollout = self.rollouts[key] = self.rollouts[key].fresh()
        self.stalls.forget(key)
        self._changed(rollout)
        return rollout

    def unload(self, key: str) -> None:
        """Let a finished rollout's traces leave memory: its row, the stats and compare
        read the summary kept in their place; `reload` puts them back."""
        self.rollouts[key].unload()

    def reload(self, key: str, loaded: Rollout) -> None:
        """An unloaded rollout's traces back, from `loaded`: the same rollout rebuilt
        from its recorded records."""
        rollout = self.rollouts[key]
        rollout.reload(loaded)
        self._changed(rollout, recount=False)

    def started(self, key: str, request_id: str, t: float | None = None) -> None:
        rollout = self.rollouts[key]
        rollout.request_id = request_id
        rollout.status = Status.RUNNING
        rollout.started_at = t if t is not None else self.clock()
        self.stalls.live(rollout)
        self._changed(rollout)

    def running_from(self, key: str, t: float) -> None:
        """It began running at `t`, as its source knows (its first delta may reach
        this store later: a viewer that joined mid-run is sent the deltas so far)."""
        rollout = self.rollouts[key]
        rollout.running_since = t
        self._changed(rollout)

    def restore(self, key: str, status: Status) -> None:
        """An unfinished rollout's status as a recording's index last saw it."""
        rollout = self.rollouts[key]
        rollout.status = status
        if status in LIVE:
            self.stalls.live(rollout)
        self._changed(rollout)

    def cancelling(self, key: str) -> None:
        rollout = self.rollouts[key]
        if not rollout.status.finished:
            rollout.status = Status.CANCELLING
            self.stalls.cancelling(rollout)
            self._changed(rollout)

    def apply_delta(self, key: str, delta: WireDelta, t: float | None = None) -> dict[str, Any]:
        """The one way a delta reaches a rollout, from every source (a run we
        dispatched, a tap, a recording, a run folder, a followed file): `delta` is as
        its source decoded it and applied nowhere yet. It is applied to the rollout's
        assembly, which checks it first (an `AssemblyError` then, with nothing
        changed), and what the views show of it is derived, received at `t` (now if
        None). Returns the trace as folded (the dropped one for a discard)."""
        rollout = self.rollouts[key]
        folded = rollout.assembly.apply(delta)
        now = t if t is not None else self.clock()
        rollout.last_delta_at = now
        rollout.deltas += 1
        self.stalls.spoke(rollout)
        trace_id = delta["trace"]
        self._changes.traces.add((key, trace_id))
        if delta.get("discard"):
            dropped = rollout.discard(trace_id)
            # a card counts flags, and one with no trace as waiting
            self._changed(rollout, recount=dropped is not None and bool(dropped.flags or not rollout.traces))
            return folded
        state = rollout.traces.get(trace_id)
        began = state is None and not rollout.traces
        if state is None:
            state = rollout.traces[trace_id] = TraceState(trace_id, rollout.assembly.traces[trace_id])
        state.revision += 1
        nodes = delta.get("nodes")
        raised = False
        if nodes:
            raised = state.raise_flags(nodes)
            for node in nodes:
                sampled = bool(node.get("sampled"))
                state.sampled.append(sampled)
                if sampled:
                    state.turns += 1
                    message = node.get("message") or {}
                    state.tools_since = now if message.get("tool_calls") else None
                elif (node.get("message") or {}).get("role") == "tool":
                    state.tools_since = None
        calls = delta.get("calls")
        failed = state.add_calls(calls) if calls else []
        errors = delta.get("errors")
        if (errors or failed) and len(state.error_text) < ERROR_WORDS_LIMIT:
            state.error_text = add_error_words(state.error_text, [*(errors or ()), *failed])
        if "pending" in delta or nodes:
            if state.pending:
                if state.pending_since is None:
                    state.pending_since = state.model_since = now
                state.tools_since = None
            else:
                state.pending_since = state.model_since = None
        if began and rollout.running_since is None:  # running from here, not waiting; a late joiner was told since when, before this
            rollout.running_since = now
        # what a card counts moves when it began (running, not waiting) or raised a flag
        # (rare); last, as its facts read all the delta carried
        self._changed(rollout, recount=began or raised)
        return folded

    def finished(self, key: str, record: dict[str, Any], t: float | None = None) -> None:
        """The run replied with its episode."""
        self.ended(key, episode_ending(record), record, t)

    def failed(self, key: str, reason: str, cancelled: bool = False, t: float | None = None) -> None:
        """The run ended without an episode."""
        self.ended(key, Ending(Status.CANCELLED if cancelled else Status.FAILED, reason), None, t)

    def unobserved(self, key: str, reason: str, t: float | None = None) -> None:
        """The viewer stopped watching a run someone else drives; the run goes on."""
        self.ended(key, Ending(Status.UNOBSERVED, reason), None, t)

    def ended(self, key: str, ending: Ending, record: dict[str, Any] | None = None, t: float | None = None) -> None:
        """The one way a rollout ends (the first ending wins); `record` is its episode
        when the run replied with one, kept even if it came after the ending."""
        rollout = self.rollouts[key]
        if record is not None:
            rollout.record = record
        if rollout.status.finished:
            if record is not None:
                self._changed(rollout)
            return
        self.stalls.forget(key)
        rollout.reason = ending.reason
        rollout.status = ending.status
        rollout.ended_at = t if t is not None else self.clock()
        for trace in rollout.traces.values():
            trace.pending_since = trace.tools_since = None
        if ending.status is Status.DONE and rollout.primary is not None:
            self._phases[rollout.variant].set(key, phase_durations(rollout.primary.timing))
        elif ending.status is Status.DONE and (times := rollout.times) is not None:
            self._phases[rollout.variant].set(key, times.durations())  # known by its summary alone
        self._changed(rollout)

    def dropped_frame(self, variant: str, reason: str) -> None:
        self.dropped_frames += 1
        self.last_drop = f"{variant}: {reason}"
        self._changes.variants.add(variant)

    def touch_rollout(self, key: str) -> None:
        """Something a view shows of a rollout changed outside its deltas."""
        self._changed(self.rollouts[key], recount=False)

    def touch_variant(self, name: str) -> None:
        """A variant's own state changed (lifecycle, server pid, escalation)."""
        self._changes.variants.add(name)

    def take_changes(self) -> Changes:
        changes, self._changes = self._changes, Changes()
        return changes

    def variant_rollouts(self, variant: str) -> Iterable[Rollout]:
        return (self.rollouts[key] for key in self.variants.get(variant, ()))

    def latest_run(self, variant: str) -> int:
        keys = self.variants.get(variant)
        return self.rollouts[keys[-1]].run if keys else 1

    def stats(self, variant: str, run: int | None = None) -> VariantStats:
        """Counts, mean reward (over one run's rollouts, if given) and phase
        percentiles, read from what the store keeps counted as rollouts change, never
        a pass over them; cached until one of the variant's rollouts changes status,
        ending or record. Do not mutate what it returns."""
        version = self._versions.get(variant, 0)
        cached = self._stats.get((variant, run))
        if cached is not None and cached[0] == version:
            return cached[1]
        tally = self._tallies.get((variant, run)) or Tally(dict.fromkeys(Status, 0))
        finished = self._finished_tally(variant) if run in (None, 1) else None
        counts, reward_sum, scored = dict(tally.counts), tally.reward_sum, tally.scored
        if finished is not None:
            for status, count in finished.counts.items():
                counts[status] += count
            reward_sum, scored = reward_sum + finished.reward_sum, scored + finished.scored
        phases = self._phases.get(variant)
        stats = VariantStats(
            counts=counts,
            mean_reward=float(reward_sum / scored) if scored else None,
            scored=scored,
            phases={
                phase: (percentile(values, 0.5), percentile(values, 0.95))
                for phase in DURATION_KEYS
                if (values := phases.by_phase.get(phase) if phases is not None else None)
            },
            flagged=dict(tally.flagged),
        )
        self._stats[(variant, run)] = (version, stats)
        return stats

    def _finished_tally(self, variant: str) -> Tally | None:
        """What the finished rows without a rollout add to a variant's counts, counted
        over the columns for every variant at once (again only once `touch_finished`
        said rows were added or taken over: a step or an annotation learnt moves no count)."""
        rows = self.finished_rows
        if rows is None:
            return None
        if self._finished_tallies is None or self._finished_tallies[0] != self._finished_counted:
            from tracewatch.core.session.finished_columns import (
                finished_tallies,  # numpy: only for a session that keeps columns
            )

            self._finished_tallies = (self._finished_counted, finished_tallies(rows))
        return self._finished_tallies[1].get(variant)

    def touch_finished(self, variants: Iterable[str]) -> None:
        """Finished rows were added or a rollout took one over: the cards and every
        view of the run count again."""
        self._finished_counted += 1
        for name in variants:
            self._versions[name] = self._versions.get(name, 0) + 1
            self._changes.variants.add(name)
        self.version += 1

    def running_count(self) -> int:
        """Rollouts running (begun, not waiting for a slot), over every variant and
        run: the sum of the cards' counts, so the status line and they agree."""
        return sum(tally.counts[Status.RUNNING] for (_, run), tally in self._tallies.items() if run is None)

    def stall_threshold(self, variant: str) -> float:
        """How long a live rollout of `variant` may be silent before it is stalled: its
        variant's own `stall_seconds`, else the store's. The table, the filter, the
        status line, the alerts and headless all ask here, so they agree."""
        return self.stalls.threshold(variant)

    def is_stalled(self, rollout: Rollout, now: float) -> bool:
        return rollout.stalled(now, self.stall_threshold(rollout.variant))

    def cap_stall(self, limit: float) -> None:
        """No variant waits longer than `limit` to call a rollout stalled (a cancel
        threshold below a variant's own must see the stall to act on it)."""
        self.stalls.cap(limit)

    def stalled(self, now: float | None = None) -> list[Rollout]:
        """The live rollouts silent past their variant's `stall_threshold`, oldest first."""
        rollouts = self.rollouts
        found = [rollouts[key] for key in self._silent(now)]
        return sorted(found, key=lambda r: r.started_at or 0.0)

    def live_counts(self, now: float | None = None) -> tuple[int, int]:
        """How many rollouts are running, and how many live ones stalled, for a status
        line redrawn each second: the cards' counts, and a look at the quietest."""
        return self.running_count(), len(self._silent(now))

    def _silent(self, now: float | None) -> list[str]:
        return self.stalls.silent(now if now is not None else self.clock(), self.rollouts, self.variants)

    def _changed(self, rollout: Rollout, recount: bool = True) -> None:
        """The one way to say a rollout changed: the views redraw it, and, with
        `recount` (what a card counts of it or its times may have moved), the run's
        series and its variant's tallies count it again, its old counts taken back,
        and its variant's stats are stale."""
        variant = rollout.variant
        self._changes.rollouts.add(rollout.key)
        self._changes.variants.add(variant)
        if not recount:
            return
        self._versions[variant] = self._versions.get(variant, 0) + 1
        self.version += 1
        counts = rollout.counts()
        old = self._counted.get(rollout.key)
        if counts == old:
            return
        self._counted[rollout.key] = counts
        self.series.occupancy(variant, old.occupancy if old is not None else None, counts.occupancy)
        self.series.outcome(variant, old.outcome if old is not None else None, counts.outcome)
        if old is not None and old.counted == counts.counted:
            return
        for place in ((variant, None), (variant, rollout.run)):
            tally = self._tallies.get(place)
            if tally is None:
                tally = self._tallies[place] = Tally(dict.fromkeys(Status, 0))
            if old is not None:
                tally.add(old.counted, -1)
            tally.add(counts.counted, 1)
