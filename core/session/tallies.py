"""Each variant's counts kept as its rollouts change, rather than counted again over
all of them: a card and the status line are redrawn several times a second, and with
tens of thousands of rollouts in flight some rollout changes between any two redraws,
so a count from scratch would be a pass over every rollout each time, in the way of
the keys.

A rollout is counted by what a card shows of it (`Counted`): its status as shown (one
waiting for a slot is queued), its flags, and its reward once it finished. The store
counts it again whenever it says one of these may have changed (`RolloutStore._bump`),
taking its last contribution back first; the phase percentiles keep each phase's
seconds sorted as done rollouts arrive.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from fractions import Fraction

from tracewatch.core.session.status import Status

Counted = tuple["Status", frozenset[str], float | None]
"""A rollout as a card counts it: status as shown, flags, reward if it is scored."""

_EXACT_FROM = 2.0**52
"""Rewards past this size are summed exactly: a float sum would drop the fractions of
the others, or overflow, and taking the big one back would not restore them."""


@dataclass
class Tally:
    """One variant's (or one of its runs') counts by status, flags and rewards."""

    counts: dict[Status, int]
    flagged: dict[str, int] = field(default_factory=dict)
    reward_sum: float | Fraction = 0.0
    """Float while every sum is exact enough; exact (`Fraction`) from the first reward
    so large that adding and taking it back would lose the small ones or overflow."""
    scored: int = 0

    def add(self, counted: Counted, sign: int) -> None:
        status, flags, reward = counted
        self.counts[status] += sign
        for flag in flags:
            left = self.flagged.get(flag, 0) + sign
            if left:
                self.flagged[flag] = left
            else:
                del self.flagged[flag]
        if reward is not None:
            if isinstance(self.reward_sum, float) and abs(reward) > _EXACT_FROM:
                self.reward_sum = Fraction(self.reward_sum)
            self.reward_sum += sign * (Fraction(reward) if isinstance(self.reward_sum, Fraction) else reward)
            self.scored += sign

    @property
    def mean_reward(self) -> float | None:
        return float(self.reward_sum / self.scored) if self.scored else None


@dataclass
class SortedPhases:
    """Per phase, the seconds of every done rollout, sorted as they arrive (a
    percentile is then a lookup), and each rollout's own, so one read again replaces
    its values rather than counting twice."""

    by_phase: dict[str, list[float]] = field(default_factory=dict)
    by_key: dict[str, dict[str, float]] = field(default_factory=dict)

    def set(self, key: str, durations: dict[str, float]) -> None:
        durations = {phase: seconds for phase, seconds in durations.items() if math.isfinite(seconds)}  # sortable
        old = self.by_key.get(key)
        if old is not None:
            for phase, seconds in old.items():
                values = self.by_phase[phase]
                del values[bisect_left(values, seconds)]
        self.by_key[key] = durations
        for phase, seconds in durations.items():
            insort(self.by_phase.setdefault(phase, []), seconds)
