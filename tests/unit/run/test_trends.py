"""The trends' values from the run's columns: rates and means over the last few
columns, the run's overall reward, and the charts' text."""

from __future__ import annotations

from tracewatch.core.run.series import Occupancy, Outcome, RunSeries
from tracewatch.core.run.trends import BY_KEY, ROLLING
from tracewatch.tui.run_views.trends_view import bars, sparkline

T0 = 1_700_000_000.0


def test_rates_and_means_look_back_over_the_last_columns_and_the_overall_reward_over_all():
    series = RunSeries()
    # one rollout ends each second for 20 s: reward 1 for the first 10, then 0; every 4th fails
    for second in range(20):
        t = T0 + second
        series.occupancy("v", None, Occupancy(T0, t - 1, t))
        status = "failed" if second % 4 == 3 else "done"
        series.outcome("v", None, Outcome(t, status, 1.0 if second < 10 else 0.0, 100, 2.0))
    columns = series.columns("v", T0, T0 + 20, 20)
    finished = BY_KEY["finished"].values(columns)
    assert finished[ROLLING - 1:] == [60.0] * (20 - ROLLING + 1), "one a second is 60 a minute"
    reward = BY_KEY["reward"].values(columns)
    assert reward[9] == 1.0 and reward[19] == 0.0 and reward[11] == 3 / 5
    overall = BY_KEY["reward_all"].values(columns)
    assert overall[19] == 0.5 and overall[0] == 1.0
    errors = BY_KEY["errors"].values(columns)
    assert errors[3] == 1 / 4 and errors[7] == 2 / 5
    assert BY_KEY["tokens"].values(columns)[19] == 100.0
    assert abs(BY_KEY["agent"].values(columns)[19] - 2.0) < 0.1
    empty = series.columns("other", T0, T0 + 20, 4)
    assert BY_KEY["reward"].values(empty) == [None] * 4 and BY_KEY["finished"].values(empty) == [0.0] * 4


def test_bars_fill_eighths_from_the_bottom_and_a_sparkline_scales_to_its_largest():
    assert bars([0.0, 0.5, 1.0, None], 0.0, 1.0, 2) == ["  █ ", " ██ "]
    assert bars([1 / 8, 1 / 32], 0.0, 1.0, 1) == ["▁ "]
    assert sparkline([None, 0.0, 2.0, 4.0]) == " ▁▄█"
