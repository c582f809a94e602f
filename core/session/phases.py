"""A trace's phases, read off its timing: which one it is in, how long each took, and
the percentiles the cards and the timing view compare them by."""

from __future__ import annotations

from typing import Any

from tracewatch.core.wire.protocol import AGENT_PARTS, PHASES, WireTiming

DURATION_KEYS = tuple(key for phase in PHASES for key in ((phase, *AGENT_PARTS) if phase == "agent" else (phase,)))
"""What the store keeps durations of: each phase, the agent's parts after it."""
ROLLOUT_PHASES = ("queued", "starting", *PHASES, "done", "error", "failed", "cancelling", "cancelled")
"""Every value `Rollout.phase` takes, in the order a rollout passes through them."""


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
