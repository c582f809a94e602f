"""A run's time series, bucketed as rollouts arrive: per variant, how many rollouts wait
and run over time, and what the rollouts that ended in each stretch of time scored,
spent and failed. Every bucket is a sum (a histogram for the median), so the buckets of
a view's column merge exactly, a rollout read again (an opened recording loads it on
demand) takes its old contribution back, and a view costs its columns, not the run's
rollouts. The buckets widen (pairs merge) as the run grows: memory and a frame's work
stay bounded however long it runs."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

BASE_WIDTH = 1.0
"""Seconds a bucket covers until the run outgrows `MAX_BUCKETS` of them."""
MAX_BUCKETS = 512
BINS_PER_DOUBLING = 8
"""The agent-time histogram's resolution: a median read from it is within 5%."""


class Occupancy(NamedTuple):
    """When a rollout was queued, started and ended (None: not yet, or unknown)."""

    queued: float | None
    started: float | None
    ended: float | None


class Outcome(NamedTuple):
    """How a rollout that ended did: when, how, its reward, tokens and agent seconds,
    and whether it was ever sent (one cancelled while queued, or failed with its
    variant before its turn, never ran)."""

    t: float
    status: str
    """done, failed or cancelled (a `Status` value)."""
    reward: float | None
    tokens: int
    agent_seconds: float | None
    sent: bool = True


@dataclass(slots=True)
class Bucket:
    """Sums over one stretch of time for one variant: the net change of rollouts
    waiting and running, and the outcomes of those that ended in it."""

    waiting: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    cancelled: int = 0
    unsent: int = 0
    """Rollouts that ended without ever being sent: counted apart from all the others."""
    reward_sum: float = 0.0
    rewarded: int = 0
    tokens: int = 0
    agent: Counter[int] = field(default_factory=Counter)
    """Agent seconds of those that finished, by log bin (`agent_bin`)."""

    @property
    def ended(self) -> int:
        """Those that ran and ended, cancelled ones too (never-sent ones are apart)."""
        return self.done + self.failed + self.cancelled

    @property
    def ran_to_end(self) -> int:
        """Those that ran to an end of their own, done or failed: the run's throughput."""
        return self.done + self.failed

    def merge(self, other: Bucket) -> None:
        self.waiting += other.waiting
        self.running += other.running
        self.done += other.done
        self.failed += other.failed
        self.cancelled += other.cancelled
        self.unsent += other.unsent
        self.reward_sum += other.reward_sum
        self.rewarded += other.rewarded
        self.tokens += other.tokens
        self.agent.update(other.agent)

    def add_outcome(self, outcome: Outcome, sign: int) -> None:
        if not outcome.sent:
            self.unsent += sign
        elif outcome.status == "done":
            self.done += sign
        elif outcome.status == "failed":
            self.failed += sign
        else:
            self.cancelled += sign
        if outcome.reward is not None:
            self.reward_sum += sign * outcome.reward
            self.rewarded += sign
        self.tokens += sign * outcome.tokens
        if outcome.agent_seconds is not None and outcome.status == "done":
            bin_ = agent_bin(outcome.agent_seconds)
            self.agent[bin_] += sign
            if not self.agent[bin_]:
                del self.agent[bin_]

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    @property
    def error_rate(self) -> float | None:
        return self.failed / self.ended if self.ended else None

    @property
    def p50_agent(self) -> float | None:
        """The median agent seconds of the rollouts that finished done."""
        total = sum(self.agent.values())
        if not total:
            return None
        seen = 0
        for bin_, count in sorted(self.agent.items()):
            seen += count
            if seen * 2 >= total:
                return bin_seconds(bin_)
        return None  # pragma: no cover - the loop returns once half are seen


def agent_bin(seconds: float) -> int:
    return round(math.log2(max(seconds, 1e-3)) * BINS_PER_DOUBLING)


def bin_seconds(bin_: int) -> float:
    return float(2 ** (bin_ / BINS_PER_DOUBLING))


@dataclass
class Column:
    """One column of a view: the merged buckets of its stretch of time, and the
    rollouts waiting and running at its end."""

    start: float
    seconds: float
    sums: Bucket
    waiting: int
    running: int

    @property
    def per_minute(self) -> float:
        """Rollouts that ran to an end per minute (`Bucket.ran_to_end`)."""
        return self.sums.ran_to_end * 60.0 / self.seconds

    @property
    def tokens_per_second(self) -> float:
        return self.sums.tokens / self.seconds


class Ended(NamedTuple):
    """Rollouts that ended, as numpy arrays of one value each (`RunSeries.add_ended`)."""

    queued: Any
    ended: Any
    done: Any
    reward: Any
    tokens: Any


class RunSeries:
    """Every variant's buckets on one time axis (`origin`, `width`)."""

    def __init__(self, width: float = BASE_WIDTH, max_buckets: int = MAX_BUCKETS) -> None:
        self.width = width
        self.max_buckets = max_buckets
        self.origin: float | None = None
        self.buckets: dict[str, list[Bucket]] = {}
        self.first: float | None = None
        """The earliest and latest time any rollout was queued, started or ended."""
        self.last: float | None = None
        self.version = 0
        """Bumped at every change: a view redraws only when it moved."""

    @property
    def count(self) -> int:
        return len(next(iter(self.buckets.values()), ()))

    def occupancy(self, variant: str, old: Occupancy | None, new: Occupancy | None) -> None:
        """A rollout's queued, started and ended times changed from `old` to `new`."""
        if old == new:
            return
        for occupancy, sign in ((old, -1), (new, 1)):
            if occupancy is None:
                continue
            queued, started, ended = (_usable(t) for t in occupancy)
            if queued is not None:
                self._bucket(variant, queued).waiting += sign
                left = started if started is not None else ended
                if left is not None:
                    self._bucket(variant, left).waiting -= sign
            if started is not None:
                self._bucket(variant, started).running += sign
                if ended is not None:
                    self._bucket(variant, ended).running -= sign
        self.version += 1

    def outcome(self, variant: str, old: Outcome | None, new: Outcome | None) -> None:
        """A rollout's outcome became `new` (or was taken back: None)."""
        if old == new:
            return
        for outcome, sign in ((old, -1), (new, 1)):
            if outcome is not None and (t := _usable(outcome.t)) is not None:
                self._bucket(variant, t).add_outcome(outcome, sign)
        self.version += 1

    def add_ended(self, variant: str, ended: Ended, sign: int = 1) -> None:
        """Many rollouts that were queued and ended without a trace read (a run's
        finished rows kept as columns), at once, summed per bucket over numpy arrays:
        each waits from `queued` to `ended` and ends then, done or failed, with its
        reward (NaN: none) and tokens, as `occupancy` and `outcome` count one such
        rollout; `sign` -1 takes them back."""
        import numpy as np  # only a session that keeps columns calls it

        queued, at = np.asarray(ended.queued, dtype=np.float64), np.asarray(ended.ended, dtype=np.float64)
        sent, landed = _usable_many(queued), _usable_many(at)
        times = np.concatenate([queued[sent], at[landed]])
        if not len(times):
            return
        for t in (float(times[0]), float(times.min()), float(times.max())):  # the grid as one by one would make it
            self._bucket(variant, t)
        assert self.origin is not None
        buckets = self.buckets[variant]
        size = len(buckets)

        def where(times: Any, mask: Any, weights: Any = None) -> list[Any]:
            index = np.maximum(0, np.floor((times[mask] - self.origin) / self.width)).astype(np.int64)
            return list(np.bincount(index, weights=None if weights is None else weights[mask], minlength=size).tolist())

        done, reward, tokens = np.asarray(ended.done, dtype=bool), np.asarray(ended.reward, dtype=np.float64), np.asarray(ended.tokens, dtype=np.float64)
        rewarded = landed & ~np.isnan(reward)
        waits, leaves = where(queued, sent), where(at, landed & sent)
        dones, fails = where(at, landed & done), where(at, landed & ~done)
        sums, counts, spent = where(at, rewarded, reward), where(at, rewarded), where(at, landed, tokens)
        for index, bucket in enumerate(buckets):
            bucket.waiting += sign * (waits[index] - leaves[index])
            bucket.done += sign * dones[index]
            bucket.failed += sign * fails[index]
            bucket.reward_sum += sign * sums[index]
            bucket.rewarded += sign * counts[index]
            bucket.tokens += sign * int(spent[index])
        self.version += 1

    def _index(self, t: float) -> int:
        assert self.origin is not None
        return max(0, math.floor((t - self.origin) / self.width))

    def columns(self, variant: str, start: float, end: float, count: int) -> list[Column]:
        """`count` columns splitting [start, end): each merges the buckets that start in
        it, and counts the rollouts waiting and running at its end."""
        count = max(1, count)
        seconds = max(end - start, 1e-9) / count
        columns = [Column(start + i * seconds, seconds, Bucket(), 0, 0) for i in range(count)]
        buckets = self.buckets.get(variant)
        if not buckets or self.origin is None:
            return columns
        waiting = running = 0
        index = 0
        for column in columns:
            column_end = column.start + seconds
            while index < len(buckets) and self.origin + index * self.width < column_end:
                bucket = buckets[index]
                waiting += bucket.waiting
                running += bucket.running
                if self.origin + index * self.width >= start:
                    column.sums.merge(bucket)
                index += 1
            column.waiting, column.running = waiting, running
        return columns

    def _bucket(self, variant: str, t: float) -> Bucket:
        self.first = t if self.first is None else min(self.first, t)
        self.last = t if self.last is None else max(self.last, t)
        if self.origin is None:
            self.origin = math.floor(t / self.width) * self.width
        if variant not in self.buckets:
            self.buckets[variant] = [Bucket() for _ in range(self.count)]
        while True:
            left = max(0, math.ceil((self.origin - t) / self.width))
            index = math.floor((t - self.origin) / self.width) + left
            if max(self.count + left, index + 1) <= self.max_buckets:
                break
            self._coarsen()
        if left:
            self.origin -= left * self.width
            for name, buckets in self.buckets.items():
                self.buckets[name] = [Bucket() for _ in range(left)] + buckets
        index = max(0, math.floor((t - self.origin) / self.width))
        for buckets in self.buckets.values():
            buckets.extend(Bucket() for _ in range(index + 1 - len(buckets)))
        return self.buckets[variant][index]

    def _coarsen(self) -> None:
        """Twice the width: pairs of buckets merge, the origin on the wider grid."""
        assert self.origin is not None
        width = self.width * 2
        origin = math.floor(self.origin / width) * width
        offset = round((self.origin - origin) / self.width)
        for variant, buckets in self.buckets.items():
            merged = [Bucket() for _ in range((len(buckets) + offset + 1) // 2)]
            for index, bucket in enumerate(buckets, offset):
                merged[index // 2].merge(bucket)
            self.buckets[variant] = merged
        self.origin, self.width = origin, width


def _usable_many(times: Any) -> Any:
    """`_usable` over a numpy array: which times a bucket can hold."""
    return (times > 0) & (times < 1e12)


def _usable(t: float | None) -> float | None:
    """A time a bucket can hold: a recording's times are read, not trusted."""
    return t if t is not None and math.isfinite(t) and 0 < t < 1e12 else None
