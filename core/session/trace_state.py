"""What a row and a transcript show of a trace, kept as its deltas land (`TraceState`),
and the facts a row shows of a rollout, derived the same from live traces or from a
recording's index (`rollout_facts`)."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any, Protocol, cast

from tracewatch.core.run.times import Attempt, RolloutTimes, call_interval, times_of
from tracewatch.core.session.phases import trace_phase
from tracewatch.core.session.rewards import scored_rewards
from tracewatch.core.tokens.flags import NO_FLAGS, node_flags
from tracewatch.core.wire.protocol import WireError, WireMessage, WireModelCall, WireNode, WireTiming, WireTrace


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
        "failed_errors",
        "model_since",
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
        self.failed_errors: list[ErrorKey] = []
        """Its failed calls' errors (`error_key`), for `count_errors`."""
        self.model_since: float | None = None
        """When its model call still open began: `pending_since`, kept after the rollout
        ended, as a call that never returned was the model's time to the end."""

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
                self.failed_errors.append(error_key(call.get("error")))
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
        """Its errors and its failed model calls, each error once (`count_errors`)."""
        return count_errors([error_key(error) for error in self.errors], self.failed_errors)

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
    def model_since(self) -> float | None:
        """When its model call still open began (None: none, or not known)."""
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
    tokens: int | None = None
    """Its traces' `num_total_tokens` summed (None: no trace reported a count yet)."""
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

    @cached_property
    def ids_text(self) -> str:
        """Its trace ids joined, lower case, where the filter's words look after the
        row's own text: kept with the facts (made again only when a trace changes), so
        `s` typed over every row does not join and lower each row's ids per keystroke."""
        return " ".join(self.trace_ids).lower()


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


ErrorKey = int
"""An error as `count_errors` tells one from another: its type and message, hashed
(a recording's index keeps one per error, never a hostile server's megabytes)."""


def error_key(error: object) -> ErrorKey:
    """What an error (a `WireError`, or whatever a failed call or a file holds) is
    known by: its type and message where they are text."""
    if not isinstance(error, dict):
        return hash(None)
    kind, message = error.get("type"), error.get("message")
    return hash((kind if isinstance(kind, str) else None, message if isinstance(message, str) else None))


def count_errors(errors: Iterable[ErrorKey], failed: Iterable[ErrorKey]) -> int:
    """A trace's errors, each once: its own errors, and its failed model calls but the
    one each of its own errors came from. A provider's 400 that ends the trace is both
    the trace's error and the failed call's, one error (verifiers records it twice);
    a failed call that was retried is an error of its own."""
    own = Counter(errors)
    count = sum(own.values())
    for key in failed:
        if own[key] > 0:
            own[key] -= 1
        else:
            count += 1
    return count


NO_FACTS = RolloutFacts(None)
"""A rollout with no trace yet."""


def _known_sum(values: Iterable[object]) -> int | None:
    """The sum of the counts reported (None: none was): a trace with no count is not 0 tokens."""
    known = [int(value) for value in values if type(value) is int]
    return sum(known) if known else None


def rollout_facts(traces: Mapping[str, TraceCounts], attempts: tuple[Attempt, ...] = ()) -> RolloutFacts:
    """Every fact a row shows, from a rollout's traces (the first is its primary) and
    the attempts it discarded before them (its times start with the first)."""
    counts = list(traces.values())
    if not counts:
        return RolloutFacts(None, times=RolloutTimes(attempts=attempts)) if attempts else NO_FACTS
    primary = counts[0]
    timing: WireTiming = primary.scalars.get("timing") or WireTiming()
    rewards = scored_rewards(trace.scalars.get("rewards") for trace in counts)
    return RolloutFacts(
        phase=trace_phase(timing, primary.scalars.get("ok"), primary.has_errors),
        turns=sum(trace.turns for trace in counts),
        tokens=_known_sum(trace.scalars.get("num_total_tokens") for trace in counts),
        reward=float(sum(map(Fraction, rewards)) / len(rewards)) if len(rewards) > 1 else rewards[0] if rewards else None,
        scored_traces=len(rewards),
        errors=sum(trace.error_count for trace in counts),
        error_text="\n".join(text for trace in counts if (text := trace.error_text)),
        trace_ids=tuple(traces),
        times=times_of(timing, primary.call_spans, attempts, primary.model_since or 0.0),
        flags=NO_FLAGS.union(*(trace.flags for trace in counts)),
    )
