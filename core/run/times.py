"""Where one rollout's time went, as a few numbers that outlive its traces: the timing
spans its server reported, its model calls' intervals, and the agent span's split into
model and harness time. A view of the whole run draws 20,000 of these, never a trace."""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tracewatch.core.wire.protocol import AGENT_PARTS, PHASES

SEGMENTS = ("waiting", "attempt", "boot", "setup", "model", "harness", "finalize", "scoring")
"""What a timeline colours a rollout's bar by, in the order its time passes: waiting
for a slot (queued until its first attempt starts), each attempt that was discarded
and retried, each span of the attempt that stands, and the agent span as its model
calls and the harness time between them."""

Attempt = tuple[float, float]
"""A discarded attempt's (start, end) by its server's clock: its first span's start to
the last time it reported (`discarded_attempt`)."""


@dataclass(frozen=True, slots=True)
class Span:
    phase: str
    start: float
    end: float | None
    """None while it is open."""


@dataclass(frozen=True, slots=True)
class RolloutTimes:
    """A trace's spans in phase order (only those that started), the agent's model and
    harness seconds as the server reported them, and its model calls as flat
    (start, end) pairs."""

    spans: tuple[Span, ...] = ()
    model: float = 0.0
    harness: float = 0.0
    calls: array[float] = field(default_factory=lambda: array("d"))
    start: float = 0.0
    """When the trace began, as the server stamped it (0: not reported)."""
    attempts: tuple[Attempt, ...] = ()
    """The rollout's earlier attempts, discarded and retried before this trace's, in order."""
    open_call: float = 0.0
    """When its model call that has not returned began (0: none open): model time to
    the last known time, though no call record holds it yet."""

    @property
    def first_start(self) -> float | None:
        return self.spans[0].start if self.spans else None

    @property
    def began(self) -> float | None:
        """The rollout's own start: its first attempt's, else its timing's start, else
        its first span's. A retried rollout's time is from its request, not from the
        attempt that stood."""
        return self.attempts[0][0] if self.attempts else self.start or self.first_start

    @property
    def finished(self) -> float | None:
        """When its last span ended, once none is open."""
        if not self.spans or any(span.end is None for span in self.spans):
            return None
        return max(span.end or 0.0 for span in self.spans)

    def span(self, phase: str) -> Span | None:
        return next((span for span in self.spans if span.phase == phase), None)

    @property
    def agent_seconds(self) -> float | None:
        agent = self.span("agent")
        return agent.end - agent.start if agent is not None and agent.end is not None else None

    def durations(self) -> dict[str, float]:
        """Seconds in each ended span, and the agent's model and harness parts, as
        `tracewatch.core.session.store.phase_durations` reads them from a trace's timing."""
        durations = {span.phase: span.end - span.start for span in self.spans if span.end is not None}
        durations.update((part, seconds) for part, seconds in (("model", self.model), ("harness", self.harness)) if seconds)
        return durations

    def call_intervals(self) -> Iterable[tuple[float, float]]:
        calls = self.calls
        return zip(calls[::2], calls[1::2])


def times_of(timing: Any, calls: array[float] | None = None, attempts: tuple[Attempt, ...] = (), open_call: float = 0.0) -> RolloutTimes:
    """A trace's `timing` scalar (read, not trusted: an opened file was never checked)
    as `RolloutTimes`; `calls` its model calls' (start, end) pairs, as the store
    collects them (`call_interval`); `attempts` the rollout's discarded ones before it;
    `open_call` when its model call still open began."""
    timing = timing if isinstance(timing, dict) else {}
    spans = []
    for phase in PHASES:
        span = timing.get(phase)
        span = span if isinstance(span, dict) else {}
        start, end = epoch_time(span.get("start")), epoch_time(span.get("end"))
        if start:
            spans.append(Span(phase, start, end if end and end >= start else None))
    agent = timing.get("agent")
    parts = [_duration(agent, part) for part in AGENT_PARTS] if isinstance(agent, dict) else [0.0, 0.0]
    return RolloutTimes(tuple(spans), parts[0], parts[1], array("d", calls or ()), epoch_time(timing.get("start")), attempts, epoch_time(open_call))


def discarded_attempt(timing: Any, calls: array[float] | None = None) -> Attempt | None:
    """A trace that is being discarded (its attempt failed and is retried) as the
    attempt it was: from its start to the last time it reported; None if it reported
    no time."""
    times = times_of(timing, calls)
    began = times.began
    if began is None:
        return None
    known = [t for span in times.spans for t in (span.start, span.end) if t is not None]
    known += list(times.calls)
    return began, max(began, *known)


def call_interval(call: Any) -> tuple[float, float] | None:
    """A model call's (start, end) from its `time`, if it has a usable one."""
    time = call.get("time") if isinstance(call, dict) else None
    if not isinstance(time, dict):
        return None
    start, end = epoch_time(time.get("start")), epoch_time(time.get("end"))
    return (start, end) if start and end and end >= start else None


def epoch_time(value: Any) -> float:
    """A time a view can place (epoch seconds), else 0.0: any value a file may hold."""
    return float(value) if isinstance(value, (int, float)) and 0 < value < 1e12 else 0.0


def _duration(agent: dict[str, Any], part: str) -> float:
    span = agent.get(part)
    value = span.get("duration") if isinstance(span, dict) else None
    return float(value) if isinstance(value, (int, float)) and 0 <= value < 1e9 else 0.0


def bar_segments(times: RolloutTimes | None, queued: float | None, horizon: float) -> list[tuple[float, float, str]]:
    """A rollout's time as (start, end, segment) pieces in order, for a timeline bar:
    waiting from `queued` until its first span starts, then each span (an open one
    up to `horizon`), the agent span cut into its model calls and the harness time
    between them. Without call times, the agent span is model then harness in the
    proportion the server reported."""
    pieces: list[tuple[float, float, str]] = []
    spans = times.spans if times is not None else ()
    attempts = times.attempts if times is not None else ()
    first = spans[0].start if spans else horizon
    began = attempts[0][0] if attempts else first
    if queued is not None and queued < began:
        pieces.append((queued, began, "waiting"))
    cursor = began
    for index, (start, _) in enumerate(attempts):  # each up to the next: its retry's wait is its own
        following = attempts[index + 1][0] if index + 1 < len(attempts) else first
        start, end = max(start, cursor), min(following, horizon)
        if end > start:
            pieces.append((start, end, "attempt"))
            cursor = end
    for span in spans:
        start, end = max(span.start, cursor), min(span.end if span.end is not None else horizon, horizon)
        if end <= start:
            continue
        if span.phase == "agent" and times is not None:
            pieces += _agent_pieces(times, start, end)
        else:
            pieces.append((start, end, span.phase))
        cursor = end
    return pieces


def _agent_pieces(times: RolloutTimes, start: float, end: float) -> list[tuple[float, float, str]]:
    pieces = []
    cursor = start
    if len(times.calls) >= 2:
        for call_start, call_end in times.call_intervals():
            call_start, call_end = max(call_start, cursor), min(call_end, end)
            if call_end <= call_start:
                continue
            if call_start > cursor:
                pieces.append((cursor, call_start, "harness"))
            pieces.append((call_start, call_end, "model"))
            cursor = call_end
    elif times.model + times.harness > 0:
        cursor = min(end, start + (end - start) * times.model / (times.model + times.harness))
        pieces.append((start, cursor, "model"))
    if times.open_call and cursor < end:  # a call that has not returned: the model's time to the end
        call_start = min(max(times.open_call, cursor), end)
        if call_start > cursor:
            pieces.append((cursor, call_start, "harness"))
        pieces.append((call_start, end, "model"))
        cursor = end
    if cursor < end:
        pieces.append((cursor, end, "harness"))
    return pieces
