"""The rollouts filter's plain definition, every value tested against every row: what
the compiled filter (`RowFilter.matcher`) must agree with."""

from __future__ import annotations

from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.core.session.store import StallTest


def reference_matches(row_filter: RowFilter, rollout: Rollout, now: float, is_stalled: StallTest) -> bool:
    """The filter's plain definition (rollout_filter's docstring), every value tested
    against every row: what the compiled test must agree with."""
    if row_filter.variants and not any(v in rollout.variant.lower() for v in row_filter.variants):
        return False
    if row_filter.statuses:
        stalled = is_stalled(rollout, now)
        if not any(v in rollout.status.value or (stalled and "stalled".startswith(v)) for v in row_filter.statuses):
            return False
    if row_filter.phases and not any(v in rollout.phase for v in row_filter.phases):
        return False
    if row_filter.flags and not any(v in flag for v in row_filter.flags for flag in rollout.flags):
        return False
    values = {
        "reward": rollout.reward, "tokens": rollout.tokens, "turns": rollout.turns, "errors": rollout.errors,
        "elapsed": rollout.elapsed(now) if rollout.started_at is not None else None,
        "step": rollout.step,
        "used": None if rollout.used is None else float(rollout.used),
    }
    for comparison in row_filter.comparisons:
        value = values[comparison.field]
        if value is None or not any(compares(value, op, number) for op, number in comparison.alternatives):
            return False
    said = [(rollout.reason or "").lower()]
    for trace in rollout.traces.values():
        for error in [*trace.errors, *(trace.call(index).get("error") for _, index in trace.failed_calls)]:
            if isinstance(error, dict):
                said.append(f"{error.get('type')}: {error.get('message')}".lower())
    if not all(any(text in words for words in said) for text in row_filter.errors):
        return False
    haystack = " ".join((rollout.key, rollout.variant, rollout.task_label, *rollout.trace_ids)).lower()
    return all(word in haystack for word in row_filter.words)


def compares(value: float, op: str, number: float) -> bool:
    if op == "<":
        return value < number
    if op == "<=":
        return value <= number
    if op == ">":
        return value > number
    if op == ">=":
        return value >= number
    return value == number
