"""The Timeline tab on the real app: a bar per rollout drawn from its summary, grouped
by variant, coloured by phase with failed and cancelled ends marked; it grows live,
zooms and pans, draws only the rows on screen, and its cursor is the table's."""

from __future__ import annotations

from tests.support.polling import until
from tests.support.timed_runs import NOW, timed_engine
from tracewatch.core.run.times import RolloutTimes, Span, bar_segments
from tracewatch.core.session.status import Status
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views.timeline_view import ENDS, LABEL_WIDTH, TimelineView


def line_text(view: TimelineView, y: int) -> str:
    return "".join(segment.text for segment in view.render_line(y))


def test_a_bar_is_waiting_then_each_span_with_the_agent_cut_into_its_model_calls():
    times = RolloutTimes(
        (Span("boot", 10, 11), Span("setup", 11, 12), Span("agent", 12, 20), Span("finalize", 20, None)),
        5.0, 3.0, __import__("array").array("d", [13, 15, 16, 19]),
    )
    assert bar_segments(times, 5.0, 22.0) == [
        (5.0, 10, "waiting"), (10, 11, "boot"), (11, 12, "setup"),
        (12, 13, "harness"), (13, 15, "model"), (15, 16, "harness"), (16, 19, "model"), (19, 20, "harness"),
        (20, 22.0, "finalize"),
    ]
    no_calls = RolloutTimes((Span("agent", 0.5, 4.5),), 3.0, 1.0)
    assert bar_segments(no_calls, None, 9.0) == [(0.5, 3.5, "model"), (3.5, 4.5, "harness")]
    assert bar_segments(None, 3.0, 9.0) == [(3.0, 9.0, "waiting")], "queued: waiting until now"


async def test_every_rollout_is_a_bar_grouped_by_variant_with_its_ending_marked():
    engine = timed_engine()
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 60)) as pilot:
        await pilot.press("5")
        view = app.timeline
        await until(pilot, lambda: view.size.height > 0 and view._rows)
        await pilot.pause()
        header = view._header_height()
        assert header == 2 + 2 * 2, "legend, axis, then running and waiting per variant"
        assert "baseline run" in line_text(view, 2) and "baseline wait" in line_text(view, 3)
        assert line_text(view, 4).startswith("candidate run ") and line_text(view, 5).startswith("candidate wait "), "whole, never \"candidat wait 0\""
        lines = [line_text(view, y) for y in range(header, header + 2 + 2 * 12)]
        assert lines[0].startswith("▾ baseline  12 rollouts") and lines[13].startswith("▾ candidate  12 rollouts")
        store = engine.store
        for line, key in zip(lines[1:13] + lines[14:], store.variants["baseline"] + store.variants["candidate"]):
            rollout = store.rollouts[key]
            assert line.split()[0] == key
            bar = line[LABEL_WIDTH:]
            if rollout.status in ENDS:
                assert ENDS[rollout.status] in bar, key
            if rollout.status is Status.DONE:
                assert "█" in bar and "▒" in bar, "model and harness both show"
            if rollout.status is Status.QUEUED:
                assert set(bar.strip()) <= {"░"}, "a queued rollout only waits"
        assert {r.status for r in store.rollouts.values()} >= {Status.DONE, Status.FAILED, Status.CANCELLED, Status.RUNNING, Status.QUEUED}


async def test_the_legend_names_every_segment_whole_in_a_half_width_pane():
    """Eight keys did not fit after the label column of a half-width pane ("scori");
    the legend line's label column is blank, so the legend moves left into it."""
    app = TracewatchApp(timed_engine())
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("5")
        view = app.timeline
        await until(pilot, lambda: view.size.height > 0 and view._rows, what=lambda: f"timeline of {view.size}")
        legend = line_text(view, 0)
        assert view.scrollable_content_region.width < LABEL_WIDTH + len(legend.strip()) + 1, "the pane is narrower than the legend after the labels"
        assert legend.rstrip().endswith("⊘cxl") and "█scoring" in legend, legend


async def test_the_timeline_cursor_is_the_tables_both_ways_and_zooms_and_pans():
    engine = timed_engine()
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 24)
        await pilot.press("5")
        view = app.timeline
        app.table.select("candidate/3")
        await until(pilot, lambda: view.cursor_key == "candidate/3")
        view.focus()
        await pilot.press("down")
        await until(pilot, lambda: app.selected == "candidate/4" and app.table.selected_key == "candidate/4")
        await pilot.press("home")
        await until(pilot, lambda: app.selected == "baseline/0")
        whole = view.span()
        await pilot.press("plus")
        start, end = view.span()
        assert abs((end - start) - (whole[1] - whole[0]) / 2) < 1e-6
        await pilot.press("right")
        assert view.span()[0] > start
        await pilot.press("0")
        assert view.window is None and view.span() == whole
        await pilot.press("enter")
        await until(pilot, lambda: app.detail.active == "tab-trace")


async def test_it_grows_live_and_draws_only_the_rows_on_screen():
    engine = timed_engine(count=400, slots=8)
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5")
        view = app.timeline
        await until(pilot, lambda: len(view._rows) == 802)
        await pilot.pause()
        drawn = view.rows_drawn
        view.refresh()
        await pilot.pause()
        assert 0 < view.rows_drawn - drawn <= view.size.height, "a repaint draws the rows on screen, not 800"
        engine.store.add_rollout("candidate", 0, {}, key="candidate/late", t=NOW)
        await until(pilot, lambda: len(view._rows) == 803 and view._rows[-1] == "candidate/late")


def test_timeline_snapshot(snap_compare):
    """A frozen run mid-way: waiting, every phase, the ends marked, concurrency above."""

    async def run_before(pilot) -> None:
        app = pilot.app
        await until(pilot, lambda: app.table.row_count == 24)
        app.table.select("baseline/4")
        await pilot.press("5")
        await until(pilot, lambda: app.timeline.cursor_key == "baseline/4")
        await pilot.pause()

    assert snap_compare(TracewatchApp(timed_engine(), title="tracewatch demo"), terminal_size=(160, 48), run_before=run_before)


def test_timeline_snapshot_80x24(snap_compare):
    async def run_before(pilot) -> None:
        await until(pilot, lambda: pilot.app.table.row_count == 24)
        await pilot.press("5")
        await until(pilot, lambda: pilot.app.timeline._rows)
        await pilot.pause()

    assert snap_compare(TracewatchApp(timed_engine(), title="tracewatch demo"), terminal_size=(80, 24), run_before=run_before)
