"""Focus goes where the keys say: Esc back to the table, a shown Compare tab has the
keys and a visible cursor, Enter in the trace's search hands the keys back to it."""

from __future__ import annotations

from textual.widgets import Static

from tests.app.test_footer import footer_labels
from tests.support.app_screen import select
from tests.support.polling import until
from tests.support.tui_standin import T0, make_engine
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views.compare_view import CompareView
from tracewatch.tui.run_views.side_by_side import SideBySideScreen
from tracewatch.tui.run_views.timeline_view import TimelineView
from tracewatch.tui.run_views.variants_panel import VariantCard


async def test_escape_from_the_transcript_returns_to_the_table() -> None:
    """Esc clears the message selection first; with nothing left to clear it goes back
    to the table, and Down moves the table's cursor, not the transcript's."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        await select(pilot, "baseline/run1/0")
        await pilot.press("enter", "down")
        transcript = app.trace_pane.transcript
        await until(pilot, lambda: app.focused is transcript and transcript._cursor is not None)
        await pilot.press("escape")
        await until(pilot, lambda: transcript._cursor is None)
        assert app.focused is transcript, "the first Esc clears the selection only"
        await pilot.press("escape")
        await until(pilot, lambda: app.focused is app.table)
        row = app.table.cursor_row
        await pilot.press("down")
        await until(pilot, lambda: app.table.cursor_row == row + 1)


async def test_showing_compare_focuses_its_task_list_and_enter_opens_side_by_side() -> None:
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        await pilot.press("4")
        view = app.query_one(CompareView)
        await until(pilot, lambda: app.focused is view and view.cursor_task is not None)
        first = view.cursor_task
        assert "reverse" in str(view.render().renderables[0].rows[0].style), "the cursor shows"
        await pilot.press("down", "enter")
        screen = await until(pilot, lambda: isinstance(app.screen, SideBySideScreen) and app.screen)
        assert screen.shown_task != first and screen.shown_task == view.cursor_task


async def test_the_footer_names_the_focused_panes_keys_and_tab_from_compare_goes_to_the_table() -> None:
    """After `4` the footer leads with the list's own key; a Tab pressed there (as the
    old keys.md told) goes to the table, not to a card whose Enter opened the table's
    trace; Tab from the table reaches the cards, then the details."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(140, 30)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        await until(pilot, lambda: footer_labels(app)[:1] == ["Help"], "the table's footer")
        await pilot.press("4")
        view = app.query_one(CompareView)
        await until(pilot, lambda: app.focused is view and footer_labels(app)[:2] == ["Side by side", "Help"], f"the Compare list's key first, not {footer_labels(app)}")
        await pilot.press("tab")
        await until(pilot, lambda: app.focused is app.table and "Side by side" not in footer_labels(app), f"the table focused, not {app.focused}")
        await pilot.press("tab")
        await until(pilot, lambda: isinstance(app.focused, VariantCard), f"a card focused, not {app.focused}")
        await pilot.press("tab")
        await until(pilot, lambda: app.focused is view and footer_labels(app)[0] == "Side by side")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, SideBySideScreen))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, SideBySideScreen))
        await pilot.press("5")
        timeline = app.query_one(TimelineView)
        await pilot.press("shift+tab")
        await until(pilot, lambda: app.focused is timeline and footer_labels(app)[:3] == ["Zoom", "Whole run", "Open trace"], f"the Timeline's keys first, not {footer_labels(app)}")


async def test_enter_in_the_trace_search_gives_the_keys_back_to_the_transcript() -> None:
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        await select(pilot, "baseline/run1/0")
        await pilot.press("enter")
        transcript = app.trace_pane.transcript
        await until(pilot, lambda: app.focused is transcript)
        await pilot.press("slash", *"CHECK", "enter")
        await until(pilot, lambda: app.focused is transcript)
        await pilot.press("2")
        await until(pilot, lambda: app.detail.active == "tab-timing")


async def test_a_trace_title_that_does_not_fit_ends_with_an_ellipsis_and_is_whole_on_hover() -> None:
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(60, 20)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        key = next(key for key, rollout in app.store.rollouts.items() if rollout.reason and rollout.status.value == "failed")
        await select(pilot, key)
        title = app.query_one("#trace-title", Static)
        whole = title.render()
        await until(pilot, lambda: app.store.rollouts[key].reason in str(title.render()))
        whole = str(title.render())
        assert len(whole) > title.size.width, "the test needs a title wider than the pane"
        drawn = title.render_line(0).text.rstrip()
        assert drawn.endswith("…"), drawn
        assert title.tooltip == whole


async def test_the_status_line_and_the_cards_read_the_same_tick() -> None:
    """Rollouts that end show on the card and in the status line together, not a
    second apart (with the clock held still, the once-a-second redraw never comes)."""
    engine = make_engine(finish=False, clock=lambda: T0)
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        status = app.query_one("#status", Static)
        card = app.cards["baseline"]
        await until(pilot, lambda: "run 7" in str(card.body.render()) and " 14 running" in str(status.render()))
        for key, rollout in list(engine.store.rollouts.items()):
            if rollout.variant == "baseline":
                engine.store.failed(key, "ended by the test", t=T0)
        await until(pilot, lambda: "run 0" in str(card.body.render()) and " 7 running" in str(status.render()))
