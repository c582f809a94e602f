"""Golden screenshots (pytest-textual-snapshot) of the screens a user reads most, on
a frozen clock and fixed data: the stand-in session over the recorded verifiers 0.4.0
stream, and a recording written from it. `pytest --snapshot-update` rewrites them
after a deliberate change; look at `__snapshots__/` beside this file before committing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from tests.support.app_screen import open_side_by_side
from tests.support.diverging_traces import diverged
from tests.support.polling import until
from tests.support.prime_rl_orchestrator import trainer_metrics
from tests.support.tui_standin import StandInEngine, make_engine, write_recording
from tracewatch.core.engine.followed_run import FollowedRun
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.engine.replay import ReplaySession
from tracewatch.core.recordings.prime_rl.layout import StreamRun, detect
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.chrome.screens import HelpScreen
from tracewatch.tui.run_views.compare_view import CompareView
from tracewatch.tui.run_views.logs_view import LogLines
from tracewatch.tui.run_views.side_by_side import SideBySideScreen

NOW = 1_764_500_000.0
"""The frozen clock: every elapsed, idle and uptime is measured against it."""


def frozen(finish: bool = False) -> StandInEngine:
    return make_engine(finish=finish, clock=lambda: NOW)


def selected(key: str, *keys: str, wait: Callable[[TracewatchApp], Any] | None = None) -> Callable[[Pilot], Any]:
    """Before the shot: every row drawn, `key` selected, then `keys` pressed."""

    async def run_before(pilot: Pilot) -> None:
        app = pilot.app
        assert isinstance(app, TracewatchApp)
        await until(pilot, lambda: app.table.row_count == len(app.store.rollouts) and app.cards)
        app.table.select(key)
        await until(pilot, lambda: app.selected == key)
        if keys:
            await pilot.press(*keys)
        if wait is not None:
            await until(pilot, lambda: wait(app))
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_main_screen(snap_compare, size: tuple[int, int]) -> None:
    app = TracewatchApp(frozen(), title="tracewatch demo")
    assert snap_compare(app, terminal_size=size, run_before=selected("baseline/run1/0"))


def test_help(snap_compare) -> None:
    app = TracewatchApp(frozen())
    assert snap_compare(app, terminal_size=(120, 48), run_before=selected("baseline/run1/0", "question_mark", wait=lambda app: isinstance(app.screen, HelpScreen)))


def test_timing(snap_compare) -> None:
    app = TracewatchApp(frozen(finish=True))
    assert snap_compare(app, terminal_size=(160, 48), run_before=selected("baseline/run1/0", "2"))


def test_replay(snap_compare, tmp_path: Path) -> None:
    path = tmp_path / "session.twrec"
    write_recording(path)
    session = ReplaySession(path, speed=0)
    app = TracewatchApp(session, title="tracewatch replay")
    assert snap_compare(app, terminal_size=(160, 48), run_before=selected("candidate/run1", wait=lambda app: session.finished))


def test_open(snap_compare, tmp_path: Path) -> None:
    path = tmp_path / "session.twrec"
    write_recording(path)
    app = TracewatchApp(OpenedRecording(path), title="tracewatch open")
    assert snap_compare(app, terminal_size=(160, 48), run_before=selected("baseline/run1"))




@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_compare(snap_compare, size: tuple[int, int]) -> None:
    app = TracewatchApp(frozen(finish=True))
    assert snap_compare(app, terminal_size=size, run_before=selected("baseline/run1/0", "4"))


def test_side_by_side(snap_compare) -> None:
    """The first task's traces side by side, opened from the Compare tab."""

    async def run_before(pilot: Pilot) -> None:
        app = pilot.app
        assert isinstance(app, TracewatchApp)
        await selected("baseline/run1/0", "4")(pilot)
        app.query_one(CompareView).focus()
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, SideBySideScreen) and all(side.transcript.rollout_key for side in app.screen.sides))
        await pilot.pause()

    assert snap_compare(TracewatchApp(frozen(finish=True)), terminal_size=(160, 48), run_before=run_before)


def test_side_by_side_where_they_part(snap_compare) -> None:
    """Two traces of a task that part at turn 3 (and again at 6), `d` pressed: both
    sides at turn 3, each differing turn marked, the first named under the title."""

    async def run_before(pilot: Pilot) -> None:
        app = pilot.app
        assert isinstance(app, TracewatchApp)
        _, screen, left, right = await open_side_by_side(app, pilot, 2, "enter")
        await until(pilot, lambda: "first difference" in str(screen.divergence.render()))
        await pilot.press("d")
        await until(pilot, lambda: all("turn 3" in side.transcript.render_line(0).text for side in (left, right)))
        await pilot.pause()

    assert snap_compare(TracewatchApp(diverged().engine), terminal_size=(160, 40), run_before=run_before)


def test_logs_at_80x24(snap_compare) -> None:
    """A server's long log line wraps in an 80-column terminal (drawn literally)."""
    engine = frozen()
    engine.variants["baseline"].lines.append("WARNING [bold]provider[/bold] " + "retrying the call after a 30 s timeout " * 3 + "(attempt 3 of 5)")
    app = TracewatchApp(engine)
    assert snap_compare(app, terminal_size=(80, 24), run_before=selected("baseline/run1/0", "3", wait=lambda app: "attempt 3 of 5" in "".join(app.logs.query_one(LogLines).lines)))


def write_metrics_run(out: Path) -> StreamRun:
    """A prime-rl output folder holding the run's metrics and eval plan as prime-rl
    writes them (`json.dumps` a row, a fixed clock here): 30 steps of the orchestrator's
    reward and the trainer's keys, the inference gauges by time, three planned evals."""
    monitor = out / "monitors" / "file"
    monitor.mkdir(parents=True)
    rows = []
    for step in range(1, 31):
        reward = round(0.2 + 0.6 * (1 - 0.9**step) + 0.05 * (step % 3 == 0), 4)
        rows.append({"step": step, "time": NOW + 20 * step, "train/reward/mean": reward, "producer": "orchestrator"})
        rows.append({"step": step, "time": NOW + 20 * step + 5, **trainer_metrics(step), "producer": "trainer"})
        rows.append({"step": None, "time": NOW + 20 * step + 9, "inference/agg/num_requests_running/mean": float(16 + step % 7), "producer": "orchestrator"})
    (monitor / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (monitor / "plan.json").write_text(json.dumps({"math": {"0": 8, "10": 8, "20": 8}}))
    layout = detect(out)
    assert isinstance(layout, StreamRun)
    return layout


def test_prime_rl_metrics(snap_compare, tmp_path: Path) -> None:
    """The Trends tab of a followed prime-rl run: the eval plan, then each key's chart
    under its producer (the value axis's range, the steps), smoothed with EMA 0.6."""
    session = FollowedRun(write_metrics_run(tmp_path / "out"), follow=False).snapshot()

    async def run_before(pilot: Pilot) -> None:
        app = pilot.app
        assert isinstance(app, TracewatchApp)
        await pilot.press("6", "m")
        await until(pilot, lambda: app.metrics is not None and len(app.metrics.charts) == 6 and app.metrics.smoothing == 1)
        await pilot.pause()

    assert snap_compare(TracewatchApp(session, title="tracewatch open out"), terminal_size=(160, 60), run_before=run_before)
