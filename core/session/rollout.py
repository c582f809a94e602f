"""One rollout: one attempt at one task by one variant, from queued to ended, and
what its row shows of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from tracewatch.core.run.series import Occupancy, Outcome
from tracewatch.core.run.times import Attempt, RolloutTimes, discarded_attempt
from tracewatch.core.session.status import LIVE, Ending, Status
from tracewatch.core.session.tallies import Counted
from tracewatch.core.session.task_identity import task_identity
from tracewatch.core.session.trace_state import NO_FACTS, RolloutFacts, TraceState, rollout_facts
from tracewatch.core.wire.assembly import EpisodeAssembly


class Counts(NamedTuple):
    """A rollout as the run's series (its times, its outcome) and its variant's
    tallies (`Counted`) count it."""

    occupancy: Occupancy
    outcome: Outcome | None
    counted: Counted


@dataclass
class Rollout:
    key: str
    variant: str
    task_index: int
    task_data: dict[str, Any]
    rollout_index: int
    run: int = 1
    """Which start of its variant queued it (pressing Start again queues a second run)."""
    status: Status = Status.QUEUED
    request_id: str | None = None
    traces: dict[str, TraceState] = field(default_factory=dict)
    created_at: float = 0.0
    started_at: float | None = None
    """When it was sent to its server (or a tap heard of it)."""
    running_since: float | None = None
    """When its first trace arrived, by the store's clock: it runs from then; before,
    it waited for a slot (`waiting`)."""
    ended_at: float | None = None
    last_delta_at: float | None = None
    deltas: int = 0
    reason: str | None = None
    """Why it failed or was cancelled, in words a user can act on."""
    record: dict[str, Any] | None = None
    """The finished episode record, once the reply landed."""
    facts: RolloutFacts | None = None
    """An index's summary, read while no trace is loaded."""
    note: str | None = None
    """What a run another program drove asked for (model, sampling), as one line."""
    unavailable: str | None = None
    """Why its traces cannot be shown: they left memory and reading them back failed."""
    task_key: str | None = None
    """verifiers' key of its task, when the source gave it (`task_identity`)."""
    step: int | None = None
    """The training step that logged it, in a training run's files (None elsewhere)."""
    attempts: tuple[Attempt, ...] = ()
    """Its attempts that were discarded and retried, by its server's clock (`discard`)."""
    used: bool | None = None
    """Whether the trainer used it (prime-rl's `info.effective`, which its orchestrator
    writes when the episode's cohort ships); None where nobody said."""
    _assembly: EpisodeAssembly | None = field(default=None, repr=False)
    _facts: tuple[tuple[tuple[str, int], ...], RolloutFacts] | None = field(default=None, repr=False, compare=False)
    """Its facts and the (id, revision) of each trace they were derived from."""

    @property
    def assembly(self) -> EpisodeAssembly:
        """The episode as its deltas build it; made on first use, so queueing 100,000
        rollouts costs no assembly for those that never run."""
        if self._assembly is None:
            self._assembly = EpisodeAssembly()
        return self._assembly

    def fresh(self) -> Rollout:
        """A new rollout in its place: the same task, variant, run, time queued and
        whether the trainer used it, nothing of what it did, for its records to be
        applied again from the start."""
        return Rollout(
            self.key, self.variant, self.task_index, self.task_data, self.rollout_index, self.run,
            created_at=self.created_at, task_key=self.task_key, step=self.step, used=self.used,
        )

    def unload(self) -> None:
        """Its traces leave memory; its row, the stats and compare read its summary,
        kept in their place, until `reload`."""
        self.facts = self.summary()
        self.traces = {}
        self.record = None
        self._assembly = self._facts = None

    def reload(self, loaded: Rollout) -> None:
        """Its traces back, from `loaded`: the same rollout rebuilt from its records."""
        self.traces, self.record, self._assembly = loaded.traces, loaded.record, loaded._assembly
        self.facts = self.unavailable = self._facts = None

    def fold_into(self, assembly: EpisodeAssembly) -> None:
        """Its deltas are folded into `assembly`, which their source keeps too (a
        followed file's), so a trace is folded once."""
        self._assembly = assembly

    def counts(self) -> Counts:
        """What the run's series and its variant's tallies count of it now."""
        outcome = None
        if self.status.finished and self.ended_at is not None:
            times = self.times
            agent = times.agent_seconds if times is not None else None
            outcome = Outcome(self.ended_at, self.status.value, self.reward, self.tokens or 0, agent, self.started_at is not None)
        status = Status.QUEUED if self.waiting else self.status
        scored = status.finished and (self.traces or self.facts is not None)  # ended before any trace: no reward
        counted = (status, self.flags, self.reward if scored else None)
        return Counts(Occupancy(self.created_at or None, *self.ran()), outcome, counted)

    @property
    def ending(self) -> Ending | None:
        """How it ended, once it has."""
        return Ending(self.status, self.reason) if self.status.finished else None

    @cached_property
    def search_text(self) -> str:
        """Its key, variant and task, lower case, where the table's filter words look
        first (then in its trace ids). None of them changes, so a keystroke over 5,000
        rollouts does not join and lower each one's text again."""
        return " ".join((self.key, self.variant, self.task_label)).lower()

    @cached_property
    def task_identity(self) -> str:
        """Which task it ran, the same from any source (`tracewatch.core.session.task_identity`)."""
        return task_identity(self.task_key, self.task_data)

    @property
    def task_label(self) -> str:
        data = self.task_data
        return str(data.get("name") or data.get("id") or f"task {self.task_index}")

    @property
    def primary(self) -> TraceState | None:
        return next(iter(self.traces.values()), None)

    def summary(self) -> RolloutFacts:
        """What its row shows, as facts that outlive its traces: derived again only
        when one of its traces changed, or kept while none is loaded."""
        if not self.traces and (self.facts is not None or not self.attempts):
            return self.facts or NO_FACTS
        stamp = (*((trace.id, trace.revision) for trace in self.traces.values()), ("attempts", len(self.attempts)))
        cached = self._facts
        if cached is None or cached[0] != stamp:
            cached = self._facts = (stamp, rollout_facts(self.traces, self.attempts))
        return cached[1]

    def discard(self, trace_id: str) -> TraceState | None:
        """Its trace `trace_id` is discarded: an attempt that failed and is retried.
        The attempt stays part of its time (`attempts`, when it was its primary trace):
        its elapsed runs from its request, and its timeline and export draw the attempt."""
        primary = next(iter(self.traces), None)
        dropped = self.traces.pop(trace_id, None)
        if dropped is not None and trace_id == primary and (attempt := discarded_attempt(dropped.timing, dropped.call_spans)) is not None:
            self.attempts = (*self.attempts, attempt)
        return dropped

    @property
    def trace_ids(self) -> tuple[str, ...]:
        return self.summary().trace_ids

    @property
    def times(self) -> RolloutTimes | None:
        """Where its first trace's time went."""
        return self.summary().times

    @property
    def turns(self) -> int:
        return self.summary().turns

    @property
    def tokens(self) -> int | None:
        return self.summary().tokens

    @property
    def errors(self) -> int:
        return self.summary().errors

    @property
    def scored_traces(self) -> int:
        return self.summary().scored_traces

    @property
    def reward(self) -> float | None:
        return self.summary().reward

    @property
    def flags(self) -> frozenset[str]:
        return self.summary().flags

    @property
    def error_text(self) -> str:
        """Why it ended and its errors' words, lower case: where `error:TEXT` looks."""
        reason, words = (self.reason or "").lower(), self.summary().error_text
        return f"{reason}\n{words}" if words else reason

    @property
    def phase(self) -> str:
        if self.status in (Status.QUEUED, Status.CANCELLED, Status.CANCELLING) or self.waiting:
            return Status.QUEUED.value if self.waiting else self.status.value
        phase = self.summary().phase
        if phase is None:
            return "failed" if self.status is Status.FAILED else "starting"
        return "error" if self.status is Status.FAILED else phase

    @property
    def waiting(self) -> bool:
        """Sent to its server but not begun: no trace yet, as a run waiting for one of
        the server's (or vf-eval's) slots has none. Not running, not timed; it can
        still stall (a server that never answers looks the same)."""
        return self.status is Status.RUNNING and not self.summary().trace_ids and not self.attempts

    @property
    def began_at(self) -> float | None:
        """When it began running, by the store's clock (`running_since`); for one
        known only by its summary, its own start as its server recorded it."""
        if self.running_since is not None:
            return self.running_since
        times = self.times
        return times.began if times is not None else None

    def ran(self) -> tuple[float | None, float | None]:
        """When it held a slot, for the run's series: once it finished, its recorded
        timing (its start to its last span's end), kept within what this store saw of
        it (a server's clock need not be ours); until then, from its first trace to
        its end here, which may come later than its slot's (a reply follows the run)."""
        began, ended, times = self.began_at, self.ended_at, self.times
        if not self.status.finished or ended is None or times is None or times.began is None or times.finished is None:
            return began, ended
        start = min(max(times.began, self.created_at), ended)
        return start, max(start, min(times.finished, ended))

    def elapsed(self, now: float) -> float:
        """Its own time: once it finished, from its start to its last span's end as its
        server recorded them (the time it waited for a slot is not its own); while it
        runs, since its first trace arrived (the server's clock need not be ours). One
        that ended with no trace counts from when it was sent."""
        times = self.times
        if self.status.finished and times is not None and times.began is not None and times.finished is not None:
            return max(0.0, times.finished - times.began)
        began = self.began_at
        if began is None:
            if self.started_at is None or self.waiting:
                return 0.0
            began = self.started_at
        return max(0.0, (self.ended_at or now) - began)

    def activity(self, now: float) -> tuple[str, float]:
        """What the rollout is doing and for how long: the model is generating while
        a preview waits for its answer; tools run after an assistant turn with tool
        calls; otherwise it is idle since its last delta."""
        if self.status.finished or self.status is Status.QUEUED or self.waiting:
            return (Status.QUEUED.value if self.waiting else self.status.value), 0.0
        since = [t.pending_since for t in self.traces.values() if t.pending_since is not None]
        if since:
            return "generating", now - min(since)
        since = [t.tools_since for t in self.traces.values() if t.tools_since is not None]
        if since:
            return "tools", now - min(since)
        return "idle", self.idle(now)

    def stalled(self, now: float, threshold: float) -> bool:
        if self.status not in LIVE:
            return False
        return self.idle(now) > threshold

    def idle(self, now: float) -> float:
        """Seconds since it last sent anything (since it started, if nothing yet)."""
        return now - (self.last_delta_at or self.started_at or now)
