"""How the Timeline tab scales: at 5,000 rollouts (two variants, made-up but realistic
timing: `tests/timed_runs.py`) against 100 in the same run, the median and p95 of a
repaint of the whole tab, and of the keys a user presses there (a row down, a page
down, zoom in, pan) each followed by its repaint. The view draws only the rows on
screen and reads each variant's concurrency from the run's buckets, so the ratios are
expected near 1.

    .venv/bin/python -m bench.timeline
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable

from textual.geometry import Region

from tests.support.timed_runs import timed_run
from tests.support.tui_standin import StandInEngine, StandInVariant
from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views.timeline_view import TimelineView

REPEATS = 60
NOW = 1_764_500_000.0


def make_engine(rollouts: int) -> StandInEngine:
    store = RolloutStore(clock=lambda: NOW)
    per_variant = rollouts // 2
    seconds = per_variant * 2.0  # 16 slots, about 8 s a rollout: the last few are still queued
    for variant in ("baseline", "candidate"):
        timed_run(store, variant, per_variant, NOW - seconds, NOW, slots=16)
    store.take_changes()
    return StandInEngine(store, {name: StandInVariant(name, store) for name in store.variants})


def draw(view: TimelineView) -> None:
    view.render_lines(Region(0, 0, view.size.width, view.size.height))


def timed(view: TimelineView, step: Callable[[], object]) -> float:
    start = time.perf_counter()
    step()
    view.refresh()
    draw(view)
    return time.perf_counter() - start


async def measure(rollouts: int) -> dict[str, list[float]]:
    engine = make_engine(rollouts)
    app = TracewatchApp(engine)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.press("5")
        view = app.timeline
        while not view._rows or not view.size.height:
            await pilot.pause()
        view.focus()
        await pilot.pause()
        steps: dict[str, list[float]] = {}
        for repeat in range(REPEATS):
            steps.setdefault("repaint", []).append(timed(view, lambda: None))
            steps.setdefault("row down", []).append(timed(view, lambda: view.action_cursor(1)))
            steps.setdefault("page down", []).append(timed(view, lambda repeat=repeat: view.action_page(1 if repeat % 8 < 4 else -1)))
            steps.setdefault("zoom in", []).append(timed(view, lambda repeat=repeat: view.action_zoom(0.5 if repeat % 2 else 2.0)))
            steps.setdefault("pan", []).append(timed(view, lambda repeat=repeat: view.action_pan(1 if repeat % 2 else -1)))
            await pilot.pause()  # the selection messages the moves posted
        return steps


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


async def main() -> None:
    small = await measure(100)
    large = await measure(5_000)
    print(f"{'step (+ repaint)':18} {'100 p50':>9} {'5,000 p50':>10} {'5,000 p95':>10} {'ratio p50':>10}")
    for name in large:
        a, b = statistics.median(small[name]), statistics.median(large[name])
        print(f"{name:18} {a * 1e3:8.2f}ms {b * 1e3:9.2f}ms {p95(large[name]) * 1e3:9.2f}ms {b / a:9.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
