"""The trends on the real app: sparklines on each variant card, and the Trends tab's
charts, one per metric and variant, with value and time axes."""

from __future__ import annotations

from tests.support.polling import until
from tests.support.timed_runs import timed_engine
from tracewatch.core.run.trends import METRICS
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views.trends_view import run_window


async def test_cards_carry_sparklines_and_the_tab_charts_every_metric_per_variant():
    engine = timed_engine()
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 24 and app.cards)
        for card in app.cards.values():
            first = str(card.body.render()).splitlines()[0]
            assert "/min" in first and "reward" in first
            assert any(c in first for c in "▁▂▃▄▅▆▇█")
        await pilot.press("6")
        await until(pilot, lambda: app.detail.active == "tab-trends" and app.trends.size.width)
        text = str(app.trends.render())
        for metric in METRICS:
            assert metric.title in text
        lines = text.splitlines()
        assert sum(line.lstrip().startswith("baseline") for line in lines) == len(METRICS)
        assert sum(line.lstrip().startswith("candidate") for line in lines) == len(METRICS)
        start, end = run_window(engine.store)
        assert f"0:{round(end - start):02d}" in lines[-1], "the time axis ends at the run's length"


def test_trends_snapshot(snap_compare):
    async def run_before(pilot) -> None:
        await until(pilot, lambda: pilot.app.table.row_count == 24)
        await pilot.press("6")
        await until(pilot, lambda: pilot.app.detail.active == "tab-trends")
        await pilot.pause()

    assert snap_compare(TracewatchApp(timed_engine(), title="tracewatch demo"), terminal_size=(160, 48), run_before=run_before)
