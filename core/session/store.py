"""The one source of truth the UI reads: every rollout of every variant, its live
traces, and what it derives from them (turns, phase, activity, tokens, reward).

Each delta is applied in time proportional to its own size. The store remembers which
rollouts, traces and variants changed since the UI last asked (`take_changes`), so a
tick redraws only those, however many deltas landed in between.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from functools import cached_property
from typing import Any, Protocol, cast

from tracewatch.core.run.series import Occupancy, Outcome, RunSeries
from tracewatch.core.run.times import RolloutTimes, call_interval, times_of
from tracewatch.core.session.tallies import Counted, SortedPhases, Tally
from tracewatch.core.session.task_identity import task_identity
from tracewatch.core.tokens.flags import NO_FLAGS, node_flags
from tracewatch.core.wire.assembly import EpisodeAssembly
from tracewatch.core.wire.protocol import (
    AGENT_PARTS,
    PHASES,
    WireError,
    WireMessage,
    WireModelCall,
    WireNode,
    WireTiming,
    WireTrace,
)

DURATION_KEYS = tuple(key for phase in PHASES for key in ((phase, *AGENT_PARTS) if phase == "agent" else (phase,)))
"""What the store keeps durations of: each phase, the agent's parts after it."""
ROLLOUT_PHASES = ("queued", "starting", *PHASES, "done", "error", "failed", "cancelling", "cancelled")
"""Every value `Rollout.phase` takes, in the order a rollout passes through them."""


class Status(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNOBSERVED = "unobserved"
    """A run someone else drives that the viewer stopped watching before it ended: it goes on."""

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset({Status.DONE, Status.FAILED, Status.CANCELLED, Status.UNOBSERVED})
_LIVE = (Status.RUNNING, Status.CANCELLING)


@dataclass(frozen=True)
class Ending:
    """How a rollout ended (done, failed or cancelled) and why: decided once, when it
    ends; a recording keeps it, so replay, open and export say the same."""

    status: Status
    reason: str | None = None


def episode_ending(record: dict[str, Any]) -> Ending:
    """A run that replied with its episode: done, unless a trace reports errors (a
    retried attempt's error stays in the head; the traces say how it ended)."""
    traces = record.get("traces") or ()
    failed = any(t.get("errors") for t in traces) if traces else bool(record.get("errors"))
    return Ending(Status.FAILED, _first_error(record)) if failed else Ending(Status.DONE)


class TraceState:
    """Display-ready facts about one live trace. `record` is the assembly's own dict
    (never copied): nodes, calls, pending, timing and the rest are read from it."""

    __slots__ = (
        "id",
        "record",
        "turns",
        "calls_by_node",
        "failed_calls",
        "pending_since",
        "tools_since",
        "revision",
        "sampled",
        "call_spans",
        "flags",
        "error_text",
    )

    def __init__(self, trace_id: str, record: dict[str, Any]) -> None:
        self.id = trace_id
        self.record = cast(WireTrace, record)
        self.turns = 0
        self.calls_by_node: dict[int, int] = {}
        """Node index to the index of the call that sampled it (`node_call`)."""
        self.failed_calls: list[tuple[int, int]] = []
        """Calls with no node (failed attempts): the node count when they ended, so a
        transcript can show them where they happened, and the call's index (`call`)."""
        self.pending_since: float | None = None
        self.tools_since: float | None = None
        self.revision = 0
        self.sampled = bytearray()
        """One byte per node, 1 where the node was sampled: a view can number the
        turns before any node without decoding the nodes (`turns_before`)."""
        self.call_spans: array[float] = array("d")
        """Its model calls' (start, end), flat: the run's timeline reads them without
        decoding the calls."""
        self.flags = NO_FLAGS
        """What is wrong with its training tokens (`node_flags`), over every node landed."""
        self.error_text = ""
        """Its errors' and failed calls' words as they landed (`add_error_words`)."""

    @property
    def nodes(self) -> Sequence[WireNode]:
        return self.record["nodes"]

    def add_calls(self, calls: Sequence[WireModelCall]) -> list[object]:
        """A delta's calls, already applied to the record (so they are its last); the
        errors of those that failed."""
        first = len(self.record["calls"]) - len(calls)
        failed: list[object] = []
        for index, call in enumerate(calls, first):
            node = call.get("node")
            if node is None:
                self.failed_calls.append((len(self.nodes), index))
                failed.append(call.get("error"))
            else:
                self.calls_by_node[int(node)] = index
            if (interval := call_interval(call)) is not None:
                self.call_spans.extend(interval)
        return failed

    def call(self, index: int) -> WireModelCall:
        """A model call, decoded from the packed calls (`PackedList`)."""
        return self.record["calls"][index]

    def node_call(self, node: int) -> WireModelCall | None:
        """The model call that sampled node `node`, if one did."""
        index = self.calls_by_node.get(node)
        return None if index is None else self.call(index)

    def turns_before(self, node: int) -> int:
        """How many turns the nodes before `node` open: the first node opens one, and
        so does each node after a sampled one."""
        return 1 + self.sampled.count(1, 0, node - 1) if node > 0 else 0

    def raise_flags(self, nodes: Iterable[WireNode]) -> bool:
        """Add the flags of nodes that landed; whether it raised a new one."""
        flags = self.flags
        for node in nodes:
            if found := node_flags(node):
                flags = flags | found
        raised, self.flags = flags != self.flags, flags
        return raised

    @property
    def pending(self) -> list[WireMessage]:
        return self.record.get("pending") or []

    @property
    def timing(self) -> WireTiming:
        return self.record.get("timing") or {}

    @property
    def errors(self) -> list[WireError]:
        return self.record.get("errors") or []

    @property
    def error_count(self) -> int:
        """Its errors and its failed model calls."""
        return len(self.errors) + len(self.failed_calls)

    @property
    def has_errors(self) -> bool:
        return bool(self.errors)

    @property
    def scalars(self) -> Mapping[str, Any]:
        """Its record, where a row's facts read its scalars (`TraceCounts`)."""
        return cast(Mapping[str, Any], self.record)


class TraceCounts(Protocol):
    """What a rollout's facts are derived from, per trace (`rollout_facts`): a live
    `TraceState`, or a recording index's counts of a trace's deltas, so a row reads
    the same whether its rollout's records are loaded or not."""

    @property
    def turns(self) -> int: ...
    @property
    def error_count(self) -> int: ...
    @property
    def has_errors(self) -> bool:
        """What `trace_phase` weighs for a trace that is not ok."""
    @property
    def error_text(self) -> str:
        """Its errors' and failed calls' words (`error_words`)."""
    @property
    def scalars(self) -> Mapping[str, Any]:
        """Its latest `timing`, `ok`, `rewards`, `num_total_tokens` and the rest."""
    @property
    def call_spans(self) -> array[float] | None: ...
    @property
    def flags(self) -> frozenset[str]:
        """Its nodes' `node_flags`, together."""


@dataclass(frozen=True)
class RolloutFacts:
    """What a row shows of a rollout, derived once from its traces (`rollout_facts`):
    the store's live ones, an index's counts of recorded ones, or kept when its traces
    left memory (`RolloutStore.unload`), so the row reads the same in each case."""

    phase: str | None
    """The first trace's phase (None: no trace opened)."""
    turns: int = 0
    tokens: int = 0
    reward: float | None = None
    """The mean over its scored traces (`scored_rewards`)."""
    scored_traces: int = 0
    """How many traces that mean is over."""
    errors: int = 0
    error_text: str = ""
    """Its errors' words, lower case (`error_words`), where `error:TEXT` looks."""
    trace_ids: tuple[str, ...] = ()
    times: RolloutTimes | None = None
    """Its first trace's timing spans and model calls (None: no trace opened)."""
    flags: frozenset[str] = NO_FLAGS
    """What is wrong with its traces' training tokens (`tracewatch.core.tokens.flags`)."""


ERROR_WORDS_LIMIT = 4096
"""How much of a trace's error words a row keeps: enough to find any error by its
type and message, never the megabytes a hostile server may send."""


def add_error_words(text: str, errors: Iterable[object]) -> str:
    """`text` with a delta's errors (`WireError`s, a trace's or its failed calls') added
    as one lower-case `type: message` line each, in the order they landed, cut at
    `ERROR_WORDS_LIMIT`; what is not an error is skipped. The live store and a
    recording's index both keep a trace's words so, and read the same."""
    lines = [text] if text else []
    for error in errors:
        if isinstance(error, dict):
            kind, message = error.get("type"), error.get("message")
            lines.append(f"{kind if isinstance(kind, str) else 'error'}: {message if isinstance(message, str) else ''}".lower())
    return "\n".join(lines)[:ERROR_WORDS_LIMIT]


NO_FACTS = RolloutFacts(None)
"""A rollout with no trace yet."""


def rollout_facts(traces: Mapping[str, TraceCounts]) -> RolloutFacts:
    """Every fact a row shows, from a rollout's traces (the first is its primary)."""
    counts = list(traces.values())
    if not counts:
        return NO_FACTS
    primary = counts[0]
    timing: WireTiming = primary.scalars.get("timing") or WireTiming()
    rewards = scored_rewards(trace.scalars.get("rewards") for trace in counts)
    return RolloutFacts(
        phase=trace_phase(timing, primary.scalars.get("ok"), primary.has_errors),
        turns=sum(trace.turns for trace in counts),
        tokens=sum(int(trace.scalars.get("num_total_tokens") or 0) for trace in counts),
        reward=float(sum(map(Fraction, rewards)) / len(rewards)) if len(rewards) > 1 else rewards[0] if rewards else None,
        scored_traces=len(rewards),
        errors=sum(trace.error_count for trace in counts),
        error_text="\n".join(text for trace in counts if (text := trace.error_text)),
        trace_ids=tuple(traces),
        times=times_of(timing, primary.call_spans),
        flags=NO_FLAGS.union(*(trace.flags for trace in counts)),
    )


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
    _assembly: EpisodeAssembly | None = field(default=None, repr=False)
    _facts: tuple[tuple[tuple[str, int], ...], RolloutFacts] | None = field(default=None, repr=False, compare=False)
    """Its facts and the (id, revision) of each trace they were derived from."""
    _occupancy: Occupancy | None = field(default=None, repr=False, compare=False)
    """Its times as the run's series last counted them (`RolloutStore._account`)."""
    _outcome: Outcome | None = field(default=None, repr=False, compare=False)
    _counted: Counted | None = field(default=None, repr=False, compare=False)
    """How its variant's tallies last counted it (`RolloutStore._bump`)."""

    @property
    def assembly(self) -> EpisodeAssembly:
        """The episode as its deltas build it; made on first use, so queueing 100,000
        rollouts costs no assembly for those that never run."""
        if self._assembly is None:
            self._assembly = EpisodeAssembly()
        return self._assembly

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
        if not self.traces:
            return self.facts or NO_FACTS
        stamp = tuple((trace.id, trace.revision) for trace in self.traces.values())
        cached = self._facts
        if cached is None or cached[0] != stamp:
            cached = self._facts = (stamp, rollout_facts(self.traces))
        return cached[1]

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
    def tokens(self) -> int:
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
        return self.status is Status.RUNNING and not self.summary().trace_ids

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
        if self.status not in _LIVE:
            return False
        return self.idle(now) > threshold

    def idle(self, now: float) -> float:
        """Seconds since it last sent anything (since it started, if nothing yet)."""
        return now - (self.last_delta_at or self.started_at or now)


def scored_rewards(trace_rewards: Iterable[Any]) -> list[float]:
    """The rewards of the traces that were scored, whose mean is the rollout's: a
    judge trace with no reward of its own does not drag a solver's down."""
    return [r for r in map(trace_reward, trace_rewards) if r is not None]


def trace_reward(rewards: Any) -> float | None:
    """Score times weight summed over named rewards, as verifiers' `Trace.reward`;
    None until one has a value (they arrive seeded with nulls)."""
    if not isinstance(rewards, dict):
        return None
    values = [
        score * (weight if _finite(weight := r.get("weight")) else 1.0)
        for r in rewards.values()
        if isinstance(r, dict) and _finite(score := r.get("score", 0.0))
    ]
    total = sum(values)
    return total if values and math.isfinite(total) else None


def _finite(value: Any) -> bool:
    """A number a reward can be computed with (a recording opened offline was never
    checked: its values are read, not trusted)."""
    return type(value) in (int, float) and math.isfinite(value)


def trace_phase(timing: WireTiming, ok: Any, has_errors: bool) -> str:
    """The span that started and has not ended; once none is open, the trace is done
    (it ended ok), in error (it recorded errors), or between two spans."""
    latest = "boot"
    for phase in PHASES:
        span = timing.get(phase) or {}
        if span.get("start"):
            if not span.get("end"):
                return phase
            latest = phase
    if ok:
        return "done"
    return "error" if has_errors else latest


def phase_durations(timing: WireTiming) -> dict[str, float]:
    """Seconds spent in each finished span, with the agent span split into model and
    harness time as the server reports them."""
    durations: dict[str, float] = {}
    for phase in PHASES:
        span = timing.get(phase) or {}
        start, end = span.get("start") or 0.0, span.get("end") or 0.0
        if start and end:
            durations[phase] = max(0.0, end - start)
    agent = timing.get("agent") or {}
    for part in AGENT_PARTS:
        duration = (agent.get(part) or {}).get("duration") or 0.0
        if duration:
            durations[part] = float(duration)
    return durations


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    rank = q * (len(sorted_values) - 1)
    low = int(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


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
        self.stall_seconds = stall_seconds
        """How long a live rollout may be silent, for a variant with no threshold of its own."""
        self.stall_by_variant = dict(stall_by_variant or {})
        """Each variant's own threshold (its config's `stall_seconds`)."""
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
        self._changes = Changes()
        self.partial: str | None = None
        """Why the store holds only part of its source yet (an opened recording still
        being indexed), said wherever a figure sums over every rollout."""
        self.dropped_frames = 0
        """Frames a client could not use (the screen may then miss what they held)."""
        self.last_drop: str | None = None
        self._live: set[str] = set()
        """Keys of the rollouts running or cancelling: what can stall, without a look at
        every queued and finished one."""
        self._heard: dict[str, float] = {}
        """The live rollouts that can stall, by when each last spoke (`Rollout.idle`),
        quietest first while `_heard_in_order`: a stall check looks at the quietest
        until one is not stalled, not at every live rollout each second."""
        self._heard_in_order = True
        """False once a rollout spoke at a time before the last one heard (times a
        recording or a test set out of order): the checks then pass over all."""
        self._last_heard = -math.inf
        self._stats: dict[tuple[str, int | None], tuple[int, VariantStats]] = {}
        self._versions: dict[str, int] = {}
        """Per variant, bumped whenever a rollout's status, ending or record changes:
        `stats` is recomputed only then, not at every redraw of 100,000 rollouts."""
        self.version = 0
        """Bumped with any variant's version (a rollout added too): a view derived from
        which rollouts there are and how they ended looks again only when it moved."""
        self.series = RunSeries()
        """Waiting, running and outcomes over time per variant, counted as they change."""

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
        self._account(rollout)
        self._touch(rollout)
        self._bump(rollout)
        self._changes.added.append(key)
        return rollout

    def reset_rollout(self, key: str) -> Rollout:
        """A fresh rollout in the same place, for records about to be applied again
        from the start (a rollout loaded on demand)."""
        old = self.rollouts[key]
        rollout = Rollout(key, old.variant, old.task_index, old.task_data, old.rollout_index, old.run, created_at=old.created_at, task_key=old.task_key, step=old.step)
        rollout._occupancy, rollout._outcome, rollout._counted = old._occupancy, old._outcome, old._counted
        self.rollouts[key] = rollout
        self._live.discard(key)
        self._heard.pop(key, None)
        self._account(rollout)
        self._touch(rollout)
        self._bump(rollout)
        return rollout

    def unload(self, key: str) -> None:
        """Let a finished rollout's traces leave memory: its row, the stats and compare
        read the summary kept in their place; `reload` puts them back."""
        rollout = self.rollouts[key]
        rollout.facts = rollout.summary()
        rollout.traces = {}
        rollout.record = None
        rollout._assembly = rollout._facts = None

    def reload(self, key: str, loaded: Rollout) -> None:
        """An unloaded rollout's traces back, from `loaded`: the same rollout rebuilt
        from its recorded records."""
        rollout = self.rollouts[key]
        rollout.traces, rollout.record, rollout._assembly = loaded.traces, loaded.record, loaded._assembly
        rollout.facts = rollout.unavailable = rollout._facts = None
        self._touch(rollout)

    def started(self, key: str, request_id: str, t: float | None = None) -> None:
        rollout = self.rollouts[key]
        rollout.request_id = request_id
        rollout.status = Status.RUNNING
        rollout.started_at = t if t is not None else self.clock()
        self._live.add(key)
        self._hear(rollout)
        self._account(rollout)
        self._touch(rollout)
        self._bump(rollout)

    def running_from(self, key: str, t: float) -> None:
        """It began running at `t`, as its source knows (its first delta may reach
        this store later: a viewer that joined mid-run is sent the deltas so far)."""
        rollout = self.rollouts[key]
        rollout.running_since = t
        self._account(rollout)
        self._touch(rollout)
        self._bump(rollout)

    def restore(self, key: str, status: Status) -> None:
        """An unfinished rollout's status as a recording's index last saw it."""
        rollout = self.rollouts[key]
        rollout.status = status
        if status in _LIVE:
            self._live.add(key)
            self._hear(rollout)
        self._account(rollout)
        self._touch(rollout)
        self._bump(rollout)

    def cancelling(self, key: str) -> None:
        rollout = self.rollouts[key]
        if not rollout.status.finished:
            rollout.status = Status.CANCELLING
            self._live.add(key)
            if key not in self._heard:
                self._hear(rollout)
            self._touch(rollout)
            self._bump(rollout)

    def apply_delta(self, key: str, delta: dict[str, Any], t: float | None = None) -> None:
        """Apply a delta the client has not applied (replay, recordings)."""
        self.rollouts[key].assembly.apply(delta)
        self.observe(key, delta, t)

    def observe(self, key: str, delta: dict[str, Any], t: float | None = None) -> None:
        """Derive display state from a delta already applied to the rollout's
        assembly (the live path: the client applies it first)."""
        rollout = self.rollouts[key]
        now = t if t is not None else self.clock()
        rollout.last_delta_at = now
        rollout.deltas += 1
        if key in self._live:
            self._hear(rollout)
        trace_id = delta["trace"]
        self._changes.traces.add((key, trace_id))
        self._touch(rollout)
        if delta.get("discard"):
            self._discard(rollout, trace_id)
            return
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
                    state.pending_since = now
                state.tools_since = None
            else:
                state.pending_since = None
        if began:  # running from here, not waiting; a late joiner was told since when, before this
            if rollout.running_since is None:
                rollout.running_since = now
            self._account(rollout)
            self._bump(rollout)
        elif raised:  # rare: a card counts flagged rollouts; last, as its facts read all the delta carried
            self._bump(rollout)

    def _discard(self, rollout: Rollout, trace_id: str) -> None:
        dropped = rollout.traces.pop(trace_id, None)
        if dropped is not None and (dropped.flags or not rollout.traces):  # a card counts flags, and one with no trace as waiting
            self._bump(rollout)

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
            self._bump(rollout)
        if rollout.status.finished:
            return
        self._live.discard(key)
        self._heard.pop(key, None)
        rollout.reason = ending.reason
        rollout.status = ending.status
        rollout.ended_at = t if t is not None else self.clock()
        for trace in rollout.traces.values():
            trace.pending_since = trace.tools_since = None
        if ending.status is Status.DONE and rollout.primary is not None:
            self._phases[rollout.variant].set(key, phase_durations(rollout.primary.timing))
        elif ending.status is Status.DONE and (times := rollout.times) is not None:
            self._phases[rollout.variant].set(key, times.durations())  # known by its summary alone
        self._account(rollout)
        self._touch(rollout)
        self._bump(rollout)

    def dropped_frame(self, variant: str, reason: str) -> None:
        self.dropped_frames += 1
        self.last_drop = f"{variant}: {reason}"
        self._changes.variants.add(variant)

    def touch_rollout(self, key: str) -> None:
        """Something a view shows of a rollout changed outside its deltas."""
        self._touch(self.rollouts[key])

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
        phases = self._phases.get(variant)
        stats = VariantStats(
            counts=dict(tally.counts),
            mean_reward=tally.mean_reward,
            scored=tally.scored,
            phases={
                phase: (percentile(values, 0.5), percentile(values, 0.95))
                for phase in DURATION_KEYS
                if (values := phases.by_phase.get(phase) if phases is not None else None)
            },
            flagged=dict(tally.flagged),
        )
        self._stats[(variant, run)] = (version, stats)
        return stats

    def running_count(self) -> int:
        """Rollouts running (begun, not waiting for a slot), over every variant and
        run: the sum of the cards' counts, so the status line and they agree."""
        return sum(tally.counts[Status.RUNNING] for (_, run), tally in self._tallies.items() if run is None)

    def stall_threshold(self, variant: str) -> float:
        """How long a live rollout of `variant` may be silent before it is stalled: its
        variant's own `stall_seconds`, else the store's. The table, the filter, the
        status line, the alerts and headless all ask here, so they agree."""
        return self.stall_by_variant.get(variant, self.stall_seconds)

    def is_stalled(self, rollout: Rollout, now: float) -> bool:
        return rollout.stalled(now, self.stall_threshold(rollout.variant))

    def cap_stall(self, limit: float) -> None:
        """No variant waits longer than `limit` to call a rollout stalled (a cancel
        threshold below a variant's own must see the stall to act on it)."""
        self.stall_seconds = min(self.stall_seconds, limit)
        self.stall_by_variant = {name: min(seconds, limit) for name, seconds in self.stall_by_variant.items()}

    def stalled(self, now: float | None = None) -> list[Rollout]:
        """The live rollouts silent past their variant's `stall_threshold`, oldest first."""
        rollouts = self.rollouts
        found = [rollouts[key] for key in self._silent(now if now is not None else self.clock())]
        return sorted(found, key=lambda r: r.started_at or 0.0)

    def live_counts(self, now: float | None = None) -> tuple[int, int]:
        """How many rollouts are running, and how many live ones stalled, for a status
        line redrawn each second: the cards' counts, and a look at the quietest."""
        return self.running_count(), len(self._silent(now if now is not None else self.clock()))

    def _silent(self, now: float) -> list[str]:
        """The keys of the live rollouts past their variant's `stall_threshold`. Asked
        once a second: it looks at the quietest live rollouts until one is not silent
        past the lowest threshold, so a run with none stalled costs a look at one
        rollout, not a pass over all in flight; a rollout is read only when variants' thresholds differ."""
        limits = {name: self.stall_threshold(name) for name in self.variants}
        lowest = min(limits.values(), default=self.stall_seconds)
        quiet = self._quiet(now, lowest)
        if all(limit == lowest for limit in limits.values()):
            return [key for key, heard in quiet if now - heard > lowest]
        rollouts = self.rollouts
        return [key for key, heard in quiet if now - heard > limits[rollouts[key].variant]]

    def _quiet(self, now: float, threshold: float) -> Iterable[tuple[str, float]]:
        """The live rollouts silent past `threshold` (and, once the times came out of
        order, every one that can stall)."""
        if not self._heard_in_order:
            return self._heard.items()
        quiet = []
        for key, heard in self._heard.items():
            if now - heard <= threshold:
                break
            quiet.append((key, heard))
        return quiet

    def _hear(self, rollout: Rollout) -> None:
        """The rollout spoke (or started): it moves to the end of `_heard`. One with
        neither time is never stalled (`Rollout.idle` is 0) and is left out."""
        heard = rollout.last_delta_at or rollout.started_at
        self._heard.pop(rollout.key, None)
        if heard is None:
            return
        if heard < self._last_heard:
            self._heard_in_order = False
        self._last_heard = max(self._last_heard, heard)
        self._heard[rollout.key] = heard

    def _account(self, rollout: Rollout) -> None:
        """Count the rollout's times and outcome in the run's series: what changed since
        they were last counted (a rollout read again takes its old counts back)."""
        occupancy = Occupancy(rollout.created_at or None, *rollout.ran())
        self.series.occupancy(rollout.variant, rollout._occupancy, occupancy)
        rollout._occupancy = occupancy
        outcome = None
        if rollout.status.finished and rollout.ended_at is not None:
            times = rollout.times
            agent = times.agent_seconds if times is not None else None
            outcome = Outcome(rollout.ended_at, rollout.status.value, rollout.reward, rollout.tokens, agent)
        self.series.outcome(rollout.variant, rollout._outcome, outcome)
        rollout._outcome = outcome

    def _touch(self, rollout: Rollout) -> None:
        self._changes.rollouts.add(rollout.key)
        self._changes.variants.add(rollout.variant)

    def _bump(self, rollout: Rollout) -> None:
        """One of what a card counts of `rollout` may have changed: its variant's
        tallies count it again (its old contribution taken back), its stats are stale."""
        variant = rollout.variant
        self._versions[variant] = self._versions.get(variant, 0) + 1
        self.version += 1
        status = Status.QUEUED if rollout.waiting else rollout.status
        scored = status in _FINISHED and (rollout.traces or rollout.facts is not None)  # ended before any trace: no reward
        counted = (status, rollout.flags, rollout.reward if scored else None)
        old = rollout._counted
        if counted == old:
            return
        rollout._counted = counted
        for place in ((variant, None), (variant, rollout.run)):
            tally = self._tallies.get(place)
            if tally is None:
                tally = self._tallies[place] = Tally(dict.fromkeys(Status, 0))
            if old is not None:
                tally.add(old, -1)
            tally.add(counted, 1)


def _first_error(record: dict[str, Any]) -> str | None:
    for errors in [record.get("errors")] + [t.get("errors") for t in record.get("traces", ())]:
        for error in errors if isinstance(errors, list) else ():
            if isinstance(error, dict):
                return f"{error.get('type', 'Error')}: {error.get('message', '')}".strip()
    return None
