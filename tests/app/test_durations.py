"""One rollout's time reads as one number in every view and command: cut to the places
shown, never rounded up (`core/run/durations`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.support.app_screen import screen_text, select
from tests.support.polling import until
from tests.support.tui_standin import StandInEngine, StandInVariant
from tracewatch.core.engine.headless import rollout_line
from tracewatch.core.run.durations import clock, cut, seconds_text, span_text
from tracewatch.core.session.compare import compare_lines, compare_store
from tracewatch.core.session.status import Ending, Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views.compare_view import CompareView

T0 = 1_700_000_000.0
TIMING = {
    "start": T0 + 0.2,
    "boot": {"start": T0 + 0.2, "end": T0 + 1.0},
    "setup": {"start": T0 + 1.0, "end": T0 + 2.0},
    "agent": {"start": T0 + 2.0, "end": T0 + 23.0, "model": {"duration": 15.0}, "harness": {"duration": 6.0}},
    "finalize": {"start": T0 + 23.0, "end": T0 + 24.0},
    "scoring": {"start": T0 + 24.0, "end": T0 + 24.9},
}
"""Its own time, first span's start to last span's end: 24.7 s (24.70000005 in floats at these epoch times)."""


def engine() -> StandInEngine:
    store = RolloutStore(clock=lambda: T0 + 30.0)
    rollout = store.add_rollout("solo", 0, {"name": "task"}, key="solo/0", t=T0)
    store.started(rollout.key, "req", t=T0)
    store.apply_delta(rollout.key, {"trace": "t0", "open": {"id": "t0"}, "set": {"timing": TIMING, "rewards": {"r": {"score": 1.0}}}}, t=T0 + 0.2)
    store.ended(rollout.key, Ending(Status.DONE, None), t=T0 + 25.0)
    return StandInEngine(store, {"solo": StandInVariant("solo", store)})


async def test_the_same_rollout_reads_the_same_seconds_in_every_view() -> None:
    """The table floored it to 0:24 while Compare rounded it to 25s."""
    session = engine()
    rollout = session.store.rollouts["solo/0"]
    assert abs(rollout.elapsed(T0 + 30.0) - 24.7) < 1e-6
    assert "24.7s" in rollout_line(rollout, T0 + 30.0), "headless"
    assert any(line.startswith("task") and " 24s" in line for line in compare_lines(compare_store(session.store))), "tracewatch compare"
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 1)
        assert app.table.cell_text("solo/0", "elapsed") == "0:24"
        await pilot.press("4")
        view = app.query_one(CompareView)
        await until(pilot, lambda: view.display and " 24s" in screen_text(app), "Compare's 24s")
        await select(pilot, "solo/0")
        await pilot.press("2")
        await until(pilot, lambda: "24.7s" in screen_text(app), "the waterfall's 24.7s")


@given(st.floats(0, 1e6, allow_nan=False))
def test_every_precision_is_the_cut_of_the_finer_one(seconds: float) -> None:
    whole = int(seconds_text(seconds, 0)[:-1])
    tenths = float(seconds_text(seconds, 1)[:-1])
    hundredths = float(seconds_text(seconds, 2)[:-1])
    minutes, _, secs = clock(seconds).rpartition(":")
    assert whole == int(tenths) == int(hundredths) == cut(seconds) <= seconds + 1e-6
    assert int(secs) == whole % 60 and clock(seconds).count(":") == (2 if whole >= 3600 else 1)
    if seconds < 1:
        assert span_text(seconds) == ("<1ms" if 0 < seconds < 0.001 else f"{int(cut(seconds * 1000))}ms")
    else:
        assert span_text(seconds) == seconds_text(seconds)


async def test_a_sub_millisecond_phase_never_reads_as_no_time_at_all() -> None:
    """The waterfall said `0ms` for a 0.4 ms scoring: a nonzero time reads `<1ms`; a
    phase that truly took no time still reads `0ms`."""
    store = RolloutStore(clock=lambda: T0 + 30.0)
    rollout = store.add_rollout("solo", 0, {"name": "task"}, key="solo/0", t=T0)
    store.started(rollout.key, "req", t=T0)
    timing = TIMING | {"finalize": {"start": T0 + 24.0, "end": T0 + 24.0}, "scoring": {"start": T0 + 24.0, "end": T0 + 24.0004}}
    store.apply_delta(rollout.key, {"trace": "t0", "open": {"id": "t0"}, "set": {"timing": timing}}, t=T0 + 0.2)
    store.ended(rollout.key, Ending(Status.DONE, None), t=T0 + 25.0)
    app = TracewatchApp(StandInEngine(store, {"solo": StandInVariant("solo", store)}))
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 1)
        await select(pilot, "solo/0")
        await pilot.press("2")
        await until(pilot, lambda: "scoring" in screen_text(app), "the waterfall")
        lines = {line.split()[0]: line for line in app.timing.render().renderables[1].plain.splitlines() if line.strip()}
        assert " <1ms" in lines["scoring"] and " 0ms" not in lines["scoring"], lines["scoring"]
        assert " 0ms" in lines["finalize"], lines["finalize"]
