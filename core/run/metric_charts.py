"""A run's own metrics (prime-rl's `metrics.jsonl`, read by the session) made ready to
chart: one chart per key and producer, by step, or by time for the rows written with
a null step, its values smoothed or not, cut into as many columns as the screen has.

Whatever a writer put there is charted or skipped with a count, never raised: a value
that is not finite is left out (and counted), a step that went backwards (a run
resumed from an earlier checkpoint) is drawn where its step is and counted, and the
arithmetic never overflows on values near the float limits (every difference is of
halves, every mean a sum of shares).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

SMOOTHING: tuple[float | None, ...] = (None, 0.6, 0.9, 0.99)
"""The smoothing levels a key cycles through: off, then an exponential moving average
weighing the value before by this much (TensorBoard's slider, in steps)."""

Floats = np.ndarray[Any, np.dtype[np.float64]]
_LIMIT = float(np.finfo(np.float64).max)


@dataclass(frozen=True)
class MetricChart:
    """One key of one producer, by step or by time: its points in x order."""

    key: str
    producer: str | None
    by_time: bool
    x: Floats
    """Steps, or epoch seconds for a time-keyed chart, ascending."""
    y: Floats
    """The values (smoothed, if asked), in x order."""
    last: float
    """The value last written (as written, not smoothed)."""
    not_finite: int
    """Rows left out: NaN or an infinity as the value (or no time, keyed by time)."""
    went_back: int
    """Times the step (or time) was lower than the row's before it."""

    @property
    def low(self) -> float:
        return float(self.y.min())

    @property
    def high(self) -> float:
        return float(self.y.max())


def smoothed(values: Floats, weight: float | None) -> Floats:
    """An exponential moving average of `values` (the first value starts it), or the values."""
    if weight is None or len(values) < 2:
        return values
    out = np.empty_like(values)
    previous = float(values[0])
    for index, value in enumerate(values.tolist()):
        previous = weight * previous + (1.0 - weight) * value
        out[index] = previous
    return np.clip(out, -_LIMIT, _LIMIT)  # two huge terms can round past the largest float


def charts_of(
    key: str, step: Floats, time: Floats, value: Floats, producer: np.ndarray[Any, Any], producers: Sequence[str | None], weight: float | None
) -> list[MetricChart]:
    """The charts of one key from its rows' columns (step NaN for a time-keyed row,
    producer a code into `producers`): one per producer that wrote it keyed by step, and
    one per producer that wrote it with a null step, keyed by time."""
    charts = []
    keyed_by_time = np.isnan(step)
    for code in np.unique(producer).tolist():
        name = producers[code] if 0 <= code < len(producers) else None
        for by_time in (False, True):
            rows = (producer == code) & (keyed_by_time == by_time)
            if not rows.any():
                continue
            x, y = (time if by_time else step)[rows], value[rows]
            finite = np.isfinite(x) & np.isfinite(y)
            known = x[np.isfinite(x)]
            went_back = int((known[1:] < known[:-1]).sum())
            x, y = x[finite], y[finite]
            if not len(x):
                charts.append(MetricChart(key, name, by_time, x, y, float("nan"), int((~finite).sum()), went_back))
                continue
            order = np.argsort(x, kind="stable")
            charts.append(MetricChart(key, name, by_time, x[order], smoothed(y[order], weight), float(y[-1]), int((~finite).sum()), went_back))
    return charts


def fraction(values: Floats, low: float, high: float) -> Floats:
    """Where each value sits between `low` and `high`, 0 to 1 (0 where they are equal),
    computed on halves so that no difference overflows."""
    span = high / 2 - low / 2
    if span <= 0:
        return np.zeros_like(values)
    return np.clip((values / 2 - low / 2) / span, 0.0, 1.0)


def columns(chart: MetricChart, width: int) -> list[float]:
    """The chart's values in `width` columns over its x range: each the mean of the
    points that fall in it, and a column between two steps the line between their
    columns (a run of 50 steps on 100 columns is not drawn as a comb)."""
    if not len(chart.x) or width <= 0:
        return []
    at = np.minimum((fraction(chart.x, float(chart.x[0]), float(chart.x[-1])) * width).astype(np.int64), width - 1)
    counts = np.bincount(at, minlength=width)
    means = np.bincount(at, weights=chart.y / counts[at], minlength=width)
    known = np.flatnonzero(counts)
    halves = np.interp(np.arange(width), known, means[known] / 2)  # halves: no overflow between huge values
    return (halves * 2).tolist()
