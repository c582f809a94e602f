"""A run's metrics made ready to chart (`tracewatch.core.run.metric_charts`): one chart
per producer, by step or by time, in x order; smoothing; columns between steps drawn
as the line between them; values near the float limits, NaN and infinities, and steps
that go backwards charted without an overflow or an exception."""

from __future__ import annotations

import math

import numpy as np

from tracewatch.core.run.metric_charts import charts_of, columns, fraction, smoothed

NAN = math.nan


def rows(steps: list[float], values: list[float], producers: list[int] | None = None, times: list[float] | None = None):
    return (
        np.array(steps, dtype=np.float64),
        np.array(times if times is not None else [float(n) for n in range(len(steps))], dtype=np.float64),
        np.array(values, dtype=np.float64),
        np.array(producers if producers is not None else [0] * len(steps), dtype=np.int16),
    )


def test_a_key_is_charted_per_producer_by_step_and_by_time() -> None:
    charts = charts_of("k", *rows([1, 2, NAN, 1], [0.5, 0.75, 31.0, 4.0], [0, 0, 0, 1]), ["orchestrator", "trainer"], None)
    found = {(chart.producer, chart.by_time): (chart.x.tolist(), chart.y.tolist(), chart.last) for chart in charts}
    assert found == {("orchestrator", False): ([1.0, 2.0], [0.5, 0.75], 0.75), ("orchestrator", True): ([2.0], [31.0], 31.0), ("trainer", False): ([1.0], [4.0], 4.0)}


def test_smoothing_is_an_exponential_moving_average_started_at_the_first_value() -> None:
    assert smoothed(np.array([1.0, 0.0, 0.0]), 0.5).tolist() == [1.0, 0.5, 0.25]
    assert smoothed(np.array([1.0, 0.0]), None).tolist() == [1.0, 0.0]


def test_a_step_that_goes_back_is_charted_in_step_order_and_counted() -> None:
    (chart,) = charts_of("loss", *rows([1, 2, 3, 2, 5], [1.0, 2.0, 3.0, 2.5, 5.0]), ["trainer"], None)
    assert chart.x.tolist() == [1, 2, 2, 3, 5] and chart.y.tolist() == [1.0, 2.0, 2.5, 3.0, 5.0]
    assert chart.went_back == 1 and chart.last == 5.0


def test_values_that_are_not_finite_are_left_out_and_counted() -> None:
    (chart,) = charts_of("k", *rows([1, 2, 3], [NAN, math.inf, 2.0]), ["trainer"], 0.9)
    assert chart.x.tolist() == [3.0] and chart.not_finite == 2 and chart.last == 2.0
    (empty,) = charts_of("k", *rows([1], [NAN]), ["trainer"], None)
    assert len(empty.x) == 0 and empty.not_finite == 1


def test_columns_between_steps_are_the_line_between_them() -> None:
    (chart,) = charts_of("k", *rows([0, 10], [0.0, 10.0]), [None], None)
    assert columns(chart, 11) == [float(n) for n in range(11)]
    (many,) = charts_of("k", *rows([0, 1, 2, 3], [1.0, 3.0, 5.0, 7.0]), [None], None)
    assert columns(many, 2) == [2.0, 6.0]  # each column the mean of the points in it


def test_values_near_the_float_limits_neither_overflow_nor_raise() -> None:
    top = 1.7e308
    (chart,) = charts_of("k", *rows([1, 2, 3], [-top, top, -top], times=[-top, 0.0, top]), [None], 0.6)
    assert all(math.isfinite(v) for v in chart.y.tolist())
    cells = columns(chart, 9)
    assert all(math.isfinite(v) for v in cells)
    shares = fraction(np.array(cells), chart.low, chart.high)
    assert shares.min() >= 0 and shares.max() <= 1
    (by_time,) = charts_of("k", *rows([NAN, NAN], [top, -top], times=[-top, top]), [None], None)
    assert columns(by_time, 3)[0] == top and columns(by_time, 3)[-1] == -top
