"""What the trends show, per variant over time, from the run's columns (`RunSeries.
columns`): rollouts finished per minute, mean reward over a rolling window and over the
whole run so far, the error rate, tokens per second and the median agent time (cancelled
rollouts and those never sent are counted apart, `set_apart`). Each is
a list of values, one per column, None where nothing was there to measure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tracewatch.core.run.series import Bucket, Column

ROLLING = 5
"""Columns a value looks back over (the column itself and the four before): a column
holds a few rollouts' endings at most, too few for a rate or a mean on its own."""


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    unit: str
    values: Callable[[list[Column]], list[float | None]]


def _rolling(read: Callable[[Bucket, float], float | None]) -> Callable[[list[Column]], list[float | None]]:
    """`read` of the last `ROLLING` columns' buckets merged, and the seconds they cover."""

    def values(columns: list[Column]) -> list[float | None]:
        out: list[float | None] = []
        for index in range(len(columns)):
            merged, seconds = Bucket(), 0.0
            for column in columns[max(0, index - ROLLING + 1) : index + 1]:
                merged.merge(column.sums)
                seconds += column.seconds
            out.append(read(merged, seconds))
        return out

    return values


def _cumulative_reward(columns: list[Column]) -> list[float | None]:
    total, count, out = 0.0, 0, []
    for column in columns:
        total, count = total + column.sums.reward_sum, count + column.sums.rewarded
        out.append(total / count if count else None)
    return out


METRICS = (
    Metric("finished", "finished per minute (ran to an end: done or failed)", "/min", _rolling(lambda b, seconds: b.ran_to_end * 60.0 / seconds)),
    Metric("reward", "mean reward", "", _rolling(lambda b, _: b.mean_reward)),
    Metric("reward_all", "mean reward over the run so far", "", _cumulative_reward),
    Metric("errors", "error rate (failed of ended)", "", _rolling(lambda b, _: b.error_rate)),
    Metric("tokens", "tokens per second (of rollouts that ended)", "/s", _rolling(lambda b, seconds: b.tokens / seconds)),
    Metric("agent", "p50 agent time", "s", _rolling(lambda b, _: b.p50_agent)),
)
"""Every rate and mean but the run's overall reward is over the last `ROLLING` columns."""


def set_apart(columns: list[Column]) -> tuple[int, int]:
    """What throughput leaves out, over `columns`: rollouts cancelled (they ran, but
    not to an end of their own) and rollouts that ended never sent."""
    return sum(column.sums.cancelled for column in columns), sum(column.sums.unsent for column in columns)
BY_KEY = {metric.key: metric for metric in METRICS}
