"""A trace's reward as verifiers computes it, and a rollout's over its scored traces."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from typing import Any


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
    checked: its values are read, not trusted); an integer past any float (a JSON
    file holds any) is not one."""
    if type(value) is int:
        return -_LARGEST <= value <= _LARGEST
    return type(value) is float and math.isfinite(value)


_LARGEST = int(sys.float_info.max)
