"""A prime-rl run's own metrics and eval plan in the real app's Trends tab (run_test),
the run written as prime-rl writes it (`tests/support/prime_rl_orchestrator.RunWriter`,
live on a thread): each key charted by step (by time for rows without one) under its
producer, the last point and the value axis's range as written, the key filter, the
smoothing, and a line per planned eval step."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.support.polling import MARGIN, until, wait_until
from tests.support.prime_rl_monitor import FileMonitor
from tests.support.prime_rl_orchestrator import ENVS, RunWriter, Script
from tests.support.tui_standin import make_engine
from tracewatch.core.engine.followed_run import FollowedRun
from tracewatch.core.recordings.prime_rl.layout import StreamRun, detect
from tracewatch.core.run.metric_charts import MetricChart
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views.metrics_view import value_text


def layout_of(out: Path) -> StreamRun:
    found = wait_until(lambda: detect(out), timeout=MARGIN, what="the run's folder")
    assert isinstance(found, StreamRun)
    return found


def written(writer: RunWriter) -> dict[tuple[str, str, bool], list[tuple[int | None, float]]]:
    """(key, producer, by time) -> its (step, value) rows, in the order written."""
    rows: dict[tuple[str, str, bool], list[tuple[int | None, float]]] = {}
    for producer, step, values in writer.metrics:
        for key, value in values.items():
            rows.setdefault((key, producer, step is None), []).append((step, value))
    return rows


def ema(values: list[float], weight: float) -> list[float]:
    out, previous = [], values[0]
    for value in values:
        previous = weight * previous + (1 - weight) * value
        out.append(previous)
    return out


async def test_the_trends_tab_charts_every_metric_as_written_with_a_filter_smoothing_and_the_plan(tmp_path):
    writer = RunWriter(tmp_path / "out", Script(episodes=36, concurrent=6, ship_every=3, pause=0.03)).start()
    session = FollowedRun(layout_of(tmp_path / "out"))
    app = TracewatchApp(session)
    async with app.run_test(size=(140, 60)) as pilot:
        await pilot.press("6")
        await until(pilot, lambda: app.metrics is not None and app.focused is app.metrics, lambda: f"the metrics focused on 6; focus is on {app.focused}")
        view = app.metrics
        assert view is not None
        truth = written(writer)

        def charted() -> dict[tuple[str | None, str | None, bool], MetricChart]:
            return {(chart.key, chart.producer, chart.by_time): chart for chart in view.charts}

        def all_drawn() -> bool:
            nonlocal truth
            truth = written(writer)
            charts = charted()
            return writer.done.is_set() and charts.keys() == truth.keys() and all(len(charts[key].x) == len(rows) for key, rows in truth.items())

        await until(pilot, all_drawn, lambda: f"every row written charted as it came; written {({k: len(v) for k, v in truth.items()})}, charted {({k: len(c.x) for k, c in charted().items()})}", timeout=120)
        writer.join()
        assert {key for key, _, _ in truth} >= {"train/reward/mean", "optim/grad_norm", "mismatch_kl/mean", "entropy/mean", "perf/throughput"}
        text = view.render().plain
        for (key, producer, by_time), rows in truth.items():
            chart = charted()[(key, producer, by_time)]
            values = [value for _, value in rows]
            assert chart.last == values[-1]
            assert (chart.low, chart.high) == (min(values), max(values))
            if not by_time:
                assert chart.x.tolist() == [step for step, _ in rows]
        # each chart's title, its value axis's range and its step axis, as written
        grads = [value for _, value in truth[("optim/grad_norm", "trainer", False)]]
        block = text[text.index("optim/grad_norm") :].splitlines()
        assert f"last {value_text(grads[-1])}" in block[0]
        assert block[1].split("┤")[0].strip() == value_text(max(grads)) and block[4].split("┤")[0].strip() == value_text(min(grads))
        steps = [step for step, _ in truth[("optim/grad_norm", "trainer", False)]]
        assert block[6].split() == [str(steps[0]), "step", str(steps[-1])]
        assert "trainer\n" in text and "orchestrator\n" in text and "(rows without a step, by time)" in text

        # the filter: `/` on the charts, words a key holds
        await pilot.press("slash", *"kl mean")
        await until(pilot, lambda: [chart.key for chart in view.charts] == ["mismatch_kl/mean"], lambda: f"only mismatch_kl/mean charted; {[c.key for c in view.charts]}")
        await pilot.press("escape")
        await until(pilot, lambda: len(view.charts) == len(truth) and app.focused is view, lambda: f"every key again, the charts focused; {len(view.charts)} charted, focus {app.focused}")

        # smoothing: m cycles off, EMA 0.6, 0.9, 0.99 and off again, named in the title
        for weight in (0.6, 0.9, 0.99):
            await pilot.press("m")
            await until(pilot, lambda weight=weight: f"smoothing: EMA {weight:g}" in view.render().plain, lambda: view.render().plain.splitlines()[0])
            smooth = ema(grads, weight)
            chart = charted()[("optim/grad_norm", "trainer", False)]
            assert chart.y.tolist() == smooth and chart.last == grads[-1]
            assert f"{value_text(max(smooth)):>10}┤" in view.render().plain
        await pilot.press("m")
        await until(pilot, lambda: "smoothing: off" in view.render().plain, lambda: view.render().plain.splitlines()[0])

        # the eval plan: a line per planned step, done of expected
        evals: Counter[int] = Counter(r.step for r in writer.landed if r.kind == "eval")
        await until(pilot, lambda: all(p.done == evals[p.step] for p in view.plan), lambda: f"the plan's done counts {[(p.step, p.done) for p in view.plan]}; landed {dict(evals)}")
        lines = [line for line in view.render().plain.splitlines() if line.startswith(ENVS[1]) and " step " in line]
        assert [line.split()[2] for line in lines] == [str(step) for step in sorted(writer.planned)]
        for line, step in zip(lines, sorted(writer.planned), strict=True):
            assert f"{evals[step]}/{writer.planned[step]} done" in line

        # a redraw whose keys' rows did not move (the plan's counts did) charts no key again
        read: list[str] = []
        points = session.metric_points
        session.metric_points = lambda key: read.append(key) or points(key)  # type: ignore[method-assign]
        session.metrics_version += 1
        assert "eval plan" in view.render().plain and read == []
        await pilot.press("m")
        keys = {key for key, _, _ in truth}
        await until(pilot, lambda: set(read) == keys, lambda: f"every key charted again, smoothed; read {read}")
    await session.shutdown()


async def test_an_eval_in_flight_is_on_its_plan_line(tmp_path):
    out = tmp_path / "out"
    monitor = FileMonitor(out, "orchestrator")
    monitor.log_eval_plan("math", 4, 3)
    dispatch = {"id": "d-1", "kind": "eval", "env": "math", "group": "g", "task": "t", "step": 4, "started": 1.0}
    monitor.log_live([{"pending": "d-1", "dispatch": dispatch}])
    monitor.finalize()
    session = FollowedRun(layout_of(out), follow=False).snapshot()
    app = TracewatchApp(session)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("6")
        view = app.metrics
        assert view is not None
        await until(pilot, lambda: [(p.step, p.in_flight) for p in view.plan] == [(4, 1)], lambda: f"step 4 with one in flight; {view.plan}")
        text = view.render().plain
        assert "0/3 done · 1 in flight" in text and "no metric rows yet" in text
    await session.shutdown()


async def test_a_session_without_metrics_keeps_the_trends_tab_as_it_was():
    app = TracewatchApp(make_engine(finish=True))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("6")
        await until(pilot, lambda: app.detail.active == "tab-trends")
        assert app.metrics is None and not app.query("#metrics-filter") and not app.query("#metrics")
        assert app.query_one("#trends-scroll").can_focus
