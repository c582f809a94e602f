"""The app driven through its keys and mouse, against a stand-in engine over a real
RolloutStore fed with the recorded verifiers 0.4.0 deltas."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static, TabbedContent

from tests.support.app_screen import notices, screen_text, select, svg_text, table, told
from tests.support.polling import until
from tests.support.tui_standin import StandInEngine, StandInVariant, load_fixture, make_engine
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.wire.episode_json import episode_json
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.chrome.keys import KEYS
from tracewatch.tui.chrome.screens import ConfirmScreen, HelpScreen, QuitScreen
from tracewatch.tui.drawing.literal import fit
from tracewatch.tui.run_views.timing_view import TimingView
from tracewatch.tui.table.columns import BY_KEY, COLUMNS
from tracewatch.tui.table.rollouts_table import RolloutsTable

INJECTION = "\x1b[31m[bold red]EVIL[/bold red] [link=x]y[/link]\x07"


async def started(pilot: Pilot, rows: int = 14) -> RolloutsTable:
    """Once the app has composed and drawn every rollout of the store."""
    await until(pilot, lambda: any(t.row_count == rows for t in pilot.app.query(RolloutsTable)))
    return table(pilot.app)


def svg(app: TracewatchApp, directory: Path, name: str) -> str:
    path = Path(app.save_screenshot(filename=f"{name}.svg", path=str(directory)))
    return path.read_text()


async def test_table_fills_then_updates_only_changed_rows() -> None:
    # a clock that stands still: running rows' elapsed and activity cells redraw every
    # second, and a loaded machine's test outlasts a second
    started_at = time.time()
    engine = make_engine(finish=False, clock=lambda: started_at)
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        # the app's first draw (a rebuild) runs after a refresh, and so, after it, does this
        first_draw = asyncio.Event()
        app.call_after_refresh(first_draw.set)
        rows = await started(pilot)

        def painted() -> bool:
            """Every row on screen drawn since the first draw (late on a loaded machine)."""
            top = int(rows.scroll_y)
            shown = rows.ordered_keys[top : top + rows.scrollable_content_region.height - 1]
            return bool(shown) and all(key in rows._strips or key == rows.selected_key for key in shown)

        await until(pilot, lambda: first_draw.is_set() and painted(), "the first draw, painted")
        drawn: list[str] = []
        row_strip = rows._row_strip
        rows._row_strip = lambda key, layer: (drawn.append(key), row_strip(key, layer))[1]
        rows.rebuild = lambda *a, **kw: pytest.fail("rebuilt on a delta")
        engine.store.failed("baseline/run3/0", "provider error")
        await until(pilot, lambda: "baseline/run3/0" in drawn and rows.cell_text("baseline/run3/0", "phase") == "error")
        assert set(drawn) <= {"baseline/run3/0", rows.selected_key}


class QueuesAsItStarts(StandInEngine):
    """Queues its rollouts when started, as a live engine does."""

    async def start(self) -> None:
        await super().start()
        for index in range(3):
            self.store.add_rollout("baseline", index, {"id": f"task-{index}"}, 0, run=1)


async def test_the_rollouts_a_start_queues_are_on_the_first_screen() -> None:
    store = RolloutStore(stall_seconds=60.0)
    app = TracewatchApp(QueuesAsItStarts(store, {"baseline": StandInVariant("baseline", store)}))
    first_screen: list[tuple[int, int]] = []
    display = app._display

    def on_display(screen, renderable) -> None:  # Textual's one way to the terminal: each screen drawn
        table = getattr(app, "table", None)
        if renderable is not None and not first_screen:
            first_screen.append((table.row_count, table.rows_drawn) if table is not None else (0, 0))
        display(screen, renderable)

    app._display = on_display
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: bool(first_screen))
    rows, drawn = first_screen[0]
    assert rows == 3 and drawn >= 3


async def test_the_views_draw_with_the_apps_palette_in_the_theme_shown() -> None:
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        dark = app.palette
        assert app.timing.palette is dark and app.compare.palette is dark
        app.theme = "textual-light"
        await until(pilot, lambda: app.palette is not dark)
        assert app.timing.palette is app.palette and app.compare.palette is app.palette
        assert (app.palette.primary, app.palette.error) != (dark.primary, dark.error)


async def test_filter_narrows_the_table() -> None:
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 40)) as pilot:
        rows = await started(pilot)
        await pilot.press("slash", *"status:failed")
        await until(pilot, lambda: rows.row_count == 2)
        await pilot.press("enter")
        assert app.focused is rows
        await pilot.press("slash", *" variant:cand")
        await until(pilot, lambda: rows.row_count == 1)
        await pilot.press("escape")
        assert app.focused is rows


async def test_escape_clears_the_filter_from_the_field_or_the_table() -> None:
    """Escape clears the filter and returns to the table."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 40)) as pilot:
        rows = await started(pilot)
        field = app.query_one("#filter", Input)
        await pilot.press("slash", *"status:failed")
        await until(pilot, lambda: rows.row_count == 2)
        await pilot.press("escape")
        await until(pilot, lambda: rows.row_count == 14)
        assert app.focused is rows and field.value == "" and not field.display
        await pilot.press("slash", *"status:failed", "enter")
        await until(pilot, lambda: rows.row_count == 2)
        assert app.focused is rows and field.display, "enter keeps the filter"
        await pilot.press("escape")
        await until(pilot, lambda: rows.row_count == 14)
        assert field.value == "" and not field.display


async def test_clearing_the_filter_shows_every_row_in_the_same_step() -> None:
    """Escape's clear reaches the table before anything else runs (not when the field's
    change message comes round behind the focus change and whatever else is queued)."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 40)) as pilot:
        rows = await started(pilot)
        await pilot.press("slash", *"status:failed")
        await until(pilot, lambda: rows.row_count == 2)
        app.action_clear_filter()
        assert rows.row_count == 14 and not rows.row_filter
        assert not app.query_one("#filter-hint", Static).display


async def test_a_filter_keystroke_reaches_the_table_in_the_same_step() -> None:
    """The field hands its text to the table as a key changes it, not in a message that
    bubbles up one widget per turn of the loop (behind the ingest and the tick)."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 40)) as pilot:
        rows = await started(pilot)
        await pilot.press("slash")
        field = app.query_one("#filter", Input)
        field.insert_text_at_cursor("status:failed")
        assert rows.row_count == 2 and rows.row_filter == RowFilter.parse("status:failed")
        field.action_delete_left_all()
        assert rows.row_count == 14 and not rows.row_filter


async def test_a_filter_longer_than_its_field_scrolls_to_the_cursor() -> None:
    """The field sizes itself without a layout of the screen, and still scrolls: the
    end of what was typed stays in view."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(60, 30)) as pilot:
        rows = await started(pilot)
        text = "variant:baseline,candidate status:running,failed phase:agent,boot words"
        await pilot.press("slash", *text)
        field = app.query_one("#filter", Input)
        await until(pilot, lambda: field.value == text)
        await until(pilot, lambda: field.render_line(0).text.rstrip().endswith("boot words"))
        assert not field.render_line(0).text.startswith("variant:")
        assert rows.row_filter == RowFilter.parse(text)


async def test_a_filter_value_that_cannot_match_says_which_values_exist() -> None:
    """`status:bogus` names the statuses rather than showing 0 rows."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 40)) as pilot:
        rows = await started(pilot)
        hint = app.query_one("#filter-hint", Static)
        await pilot.press("slash", *"status:bogus")
        await until(pilot, lambda: rows.row_count == 0 and hint.display)
        text = str(hint.render())
        assert "status:bogus matches nothing" in text and "running" in text and "stalled" in text
        await pilot.press(*["backspace"] * 5, *"fail")
        await until(pilot, lambda: rows.row_count == 2 and not hint.display)
        await pilot.press("ctrl+u", *"variant:nobody")
        await until(pilot, lambda: hint.display and "baseline, candidate" in str(hint.render()))


async def test_header_click_and_key_sort() -> None:
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(160, 40)) as pilot:
        rows = await started(pilot)
        shown = rows.columns_shown  # each as wide as its header is drawn: a wide table gives its room to some
        x = sum(len(rows.header_label(key)) for key in shown[: shown.index("tokens")]) + 2
        await pilot.click(RolloutsTable, offset=(x, 0))  # the Tokens header
        await until(pilot, lambda: rows.sort_column == "tokens")
        tokens = [int(rows.cell_text(key, "tokens").replace(",", "")) for key in rows.ordered_keys]
        assert tokens == sorted(tokens)
        await pilot.press("O")
        assert rows.sort_reverse
        await pilot.press("o")
        assert rows.sort_column == "reward"


async def test_c_cancels_the_selected_rollout() -> None:
    engine = make_engine(finish=False)
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        rows = await started(pilot)
        await select(pilot, "candidate/run1/0")
        await pilot.press("c")
        assert engine.cancelled == ["candidate/run1/0"]
        await until(pilot, lambda: rows.cell_text("candidate/run1/0", "phase") == "cancelling")
        engine.store.failed("candidate/run1/0", "cancelled", cancelled=True)
        await until(pilot, lambda: rows.cell_text("candidate/run1/0", "phase") == "cancelled")


@pytest.mark.parametrize("answer, calls", [("y", ["cancel"]), ("n", []), ("escape", [])])
async def test_x_asks_then_cancels_the_right_variant(answer: str, calls: list[str]) -> None:
    engine = make_engine()
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        await select(pilot, "candidate/run0/0")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press(answer)
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert engine.variants["candidate"].calls == calls
        assert engine.variants["baseline"].calls == []


async def test_cancel_button_shows_the_escalation(tmp_path: Path) -> None:
    engine = make_engine()
    app = TracewatchApp(engine)
    async with app.run_test(size=(200, 60)) as pilot:
        await started(pilot)
        card = app.query(".variant-card").first()
        cancel = card.query_one(".cancel", Button)
        # a click lands where the button is drawn: wait until it is, and can be pressed
        await until(pilot, lambda: not cancel.disabled and cancel.region.area > 0 and cancel.region in app.screen.region, "the Cancel button on screen")
        await pilot.click(cancel)
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm screen")
        await pilot.press("y")
        # the card's body and its button are drawn by separate refreshes: wait for the
        # frame that has both, never a look at one frame that may hold only the first
        shown = ("SIGTERM sent", "cancelling", "left", "Kill")
        await until(pilot, lambda: all(text in svg_text(svg(app, tmp_path, "cancelling")) for text in shown), f"a card showing {shown}")
        assert engine.variants["baseline"].calls == ["cancel"]


async def test_help_palette_and_readonly() -> None:
    engine = make_engine()
    engine.readonly_reason = "replaying a recording"
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await started(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, HelpScreen))
        titles = [command.title for command in app.get_system_commands(app.screen)]
        live_actions = {key.title for key in KEYS if key.palette and key.where != "replay"}
        assert live_actions <= set(titles)
        assert titles.count("Quit") == 1, "one Quit: ours, which stops the servers"
        assert not any(title.startswith("Replay") for title in titles), "no replay controls on a live session"
        assert not app.query(Button).filter(".start, .cancel"), "no Start or Cancel to press"
        given = told(app)
        await pilot.press("c", "x", "s")
        await until(pilot, lambda: len(given) >= 3, lambda: f"a notice for each of c, x and s; told {given}")
        assert given == ["Read-only\nreplaying a recording"] * 3
        assert engine.cancelled == [] and all(not v.calls for v in engine.variants.values())


async def test_q_shows_shutdown_progress_then_exits() -> None:
    engine = make_engine()
    engine.shutdown_gate = asyncio.Event()
    app = TracewatchApp(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot)
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen) and app.screen.lines)
        assert app.screen.lines == ["baseline: cancelling", "candidate: cancelling"]
        await pilot.press("q")  # a second q does not start a second shutdown
        engine.shutdown_gate.set()
        await until(pilot, lambda: app.return_code == 0)
    assert engine.shutdowns == 1


async def test_timing_waterfall_and_per_variant_percentiles(tmp_path: Path) -> None:
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 50)) as pilot:
        await started(pilot)
        await select(pilot, "baseline/run1/0")
        await pilot.press("2")
        await until(pilot, lambda: app.query_one(TabbedContent).active == "tab-timing")
        await until(pilot, lambda: "p50 / p95" in screen_text(app), "the timing tab drawn")
        shot = svg_text(svg(app, tmp_path, "timing"))
        for phase in ("boot", "setup", "agent", "model", "harness", "finalize", "scoring", "p50 / p95"):
            assert phase in shot
        assert "█" in shot
        assert app.query_one(TimingView).rollout.key == "baseline/run1/0"


async def test_logs_tab_counts_unread_and_shows_lines_literally(tmp_path: Path) -> None:
    engine = make_engine()
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        tabs = app.query_one(TabbedContent)
        await until(pilot, lambda: "new" in str(tabs.get_tab("tab-logs").label))
        await pilot.press("3")
        await until(pilot, lambda: "new" not in str(tabs.get_tab("tab-logs").label))
        await until(pilot, lambda: "[bold]not markup[/bold]" in svg_text(svg(app, tmp_path, "logs")))
        assert "\x1b" not in svg(app, tmp_path, "logs")


async def test_long_log_lines_wrap_at_80x24() -> None:
    """A server's log line longer than the pane wraps onto the next rows (its end is
    read without scrolling sideways), stays literal, and rewraps when the width changes."""
    engine = make_engine()
    long_line = "WARNING [bold]step[/bold] " + "retrying the provider call after a timeout " * 3 + "END\x1b[2J"
    engine.variants["baseline"].lines.append(long_line)
    app = TracewatchApp(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot)
        await pilot.press("3")
        await until(pilot, lambda: "END␛[2J" in screen_text(app), "the end of the long line on screen")
        assert "[bold]step[/bold]" in screen_text(app)
        await pilot.resize_terminal(120, 30)
        await until(pilot, lambda: "END␛[2J" in screen_text(app), "rewrapped to the new width")
        tabs = app.query_one(TabbedContent)
        await until(pilot, lambda: "new" not in str(tabs.get_tab("tab-logs").label))
        await pilot.press("1")
        engine.variants["candidate"].lines.append("candidate: one more line")
        await until(pilot, lambda: str(tabs.get_tab("tab-logs").label) == "Logs (25 B new)", "output arriving while hidden counted unread")


async def test_injection_in_task_labels_renders_literally(tmp_path: Path) -> None:
    engine: StandInEngine = make_engine()
    rollout = engine.store.add_rollout("baseline", 9, {"name": INJECTION}, key="baseline/evil")
    engine.store.started(rollout.key, "r-evil")
    app = TracewatchApp(engine)
    async with app.run_test(size=(200, 60)) as pilot:
        rows = await started(pilot, rows=15)
        await select(pilot, "baseline/evil")
        cell = rows.cell_text("baseline/evil", "task")
        assert "[bold red]EVIL" in cell and "\x1b" not in cell and "\x07" not in cell
        shot = svg(app, tmp_path, "injection")
        assert "\x1b" not in shot and "\x07" not in shot
        assert "[bold" in svg_text(shot)


async def test_export_writes_the_selected_episode_and_says_where(tmp_path: Path) -> None:
    engine = make_engine(session_dir=tmp_path)
    app = TracewatchApp(engine)
    path = tmp_path / "exports" / "baseline-run0-0.json"
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await started(pilot)
        await select(pilot, "baseline/run0/0")
        await pilot.press("e")
        await until(pilot, lambda: any(n.startswith("Exported") for n in notices(app)))
        assert notices(app) == [f"Exported to {path.parent}\n{path.name}"]
    assert json.loads(path.read_text()) == json.loads(episode_json(engine.store.rollouts["baseline/run0/0"].record or {}))


async def palette_screenshot(pilot: Pilot) -> None:
    """The command palette's Screenshot, chosen as a user does: ctrl+p, its name, enter."""
    await pilot.press("ctrl+p")
    await until(pilot, lambda: type(pilot.app.screen).__name__ == "CommandPalette")
    await pilot.press(*"Screenshot")
    await until(pilot, lambda: "Save an SVG" in screen_text(pilot.app), "the palette offering Screenshot")
    await pilot.press("enter")


async def test_palette_screenshot_lands_beside_the_exports_and_says_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home-without-downloads"))
    app = TracewatchApp(make_engine(session_dir=tmp_path))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await started(pilot)
        await palette_screenshot(pilot)
        await until(pilot, lambda: any("Screenshot" in n for n in notices(app)), "a notice about the screenshot")
        shots = list((tmp_path / "exports").glob("*.svg"))
        assert len(shots) == 1, notices(app)
        assert notices(app) == [f"Screenshot saved to {shots[0].parent}\n{shots[0].name}"]
        assert "baseline" in svg_text(shots[0].read_text())


async def test_palette_screenshot_that_cannot_be_saved_says_why(tmp_path: Path) -> None:
    engine = make_engine(session_dir=tmp_path)
    engine.export_dir = tmp_path / "a-file"
    engine.export_dir.write_text("")
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await started(pilot)
        await palette_screenshot(pilot)
        await until(pilot, lambda: any("Screenshot" in n for n in notices(app)), "a notice about the screenshot")
        [notice] = notices(app)
        assert notice.startswith("Screenshot\nCould not save the screenshot: ") and "a-file" in notice, notice


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
async def test_main_screens_render_at_small_and_large_sizes(size: tuple[int, int], tmp_path: Path) -> None:
    app = TracewatchApp(make_engine(finish=False), title="tracewatch demo")
    async with app.run_test(size=size) as pilot:
        await started(pilot)
        await select(pilot, "baseline/run1/0")
        main = svg_text(svg(app, tmp_path, f"main-{size[0]}"))
        for text in ("tracewatch demo", "baseline", "candidate", "Variant", "Trace", "Timing", "Logs", "Start"):
            assert text in main
        await pilot.press("2")
        await until(pilot, lambda: "boot" in screen_text(app), "the timing tab drawn")
        svg(app, tmp_path, f"timing-{size[0]}")
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert "cancel a variant" in svg_text(svg(app, tmp_path, f"help-{size[0]}"))


async def test_copy_the_selected_message_and_switch_panes() -> None:
    app = TracewatchApp(make_engine())
    copied: list[str] = []
    app.copy_to_clipboard = copied.append
    async with app.run_test(size=(120, 40)) as pilot:
        rows = await started(pilot)
        await select(pilot, "baseline/run1/0")
        await pilot.press("enter")
        transcript = app.trace_pane.transcript
        await until(pilot, lambda: app.focused is transcript)
        await pilot.press("down", "w")
        await until(pilot, lambda: copied)
        assert copied[0] == transcript.selected_block()
        await pilot.press("tab")  # the details come last: on to the table, then the cards
        assert app.focused is rows
        await pilot.press("tab")
        assert app.focused in app.cards.values() or app.focused.parent in app.cards.values()


def engine_with_a_multi_trace_rollout() -> tuple[StandInEngine, Rollout]:
    """The stand-in engine plus `baseline/multi`: the fixture's first two runs applied
    to one rollout, so its episode has two traces."""
    engine = make_engine()
    deltas, tasks, _ = load_fixture()
    rollout = engine.store.add_rollout("baseline", 0, tasks["run0"], key="baseline/multi")
    engine.store.started(rollout.key, "r-multi")
    for item in deltas:
        if item["request"] in ("run0", "run1"):
            engine.store.apply_delta(rollout.key, item["delta"])
    return engine, rollout


async def test_trace_switcher_for_a_multi_trace_episode() -> None:
    engine, rollout = engine_with_a_multi_trace_rollout()
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, rows=15)
        await select(pilot, "baseline/multi")
        switcher = await until(pilot, lambda: app.trace_pane.switcher)
        first, second = list(rollout.traces)
        assert app.trace_pane.trace_id == first
        assert [value for _label, value in switcher._options] == [first, second], "no blank entry"
        await pilot.press("tab")
        assert app.focused in app.cards.values(), "the cards come after the table"
        await pilot.press("tab")
        assert app.focused is switcher, "tab reaches the switcher, before the transcript"
        await pilot.press("tab")
        assert app.focused is app.trace_pane.transcript
        await pilot.press("shift+tab", "shift+tab", "shift+tab")
        assert app.focused is app.table
        switcher.value = second
        await until(pilot, lambda: app.trace_pane.trace_id == second)
        await pilot.press("2")  # the timing view, drawn only while its tab is open, follows
        await until(pilot, lambda: app.timing.trace_id == second)


INVISIBLE = "\u200b\u200c\u200d\u200e\u200f\ufeff\u061c\u2060\u2066\u2069\u202e\u00ad"
"""Zero-width and direction characters: they hide text or reorder what is around it."""


async def test_zero_width_and_direction_characters_show_visibly(tmp_path: Path) -> None:
    engine: StandInEngine = make_engine()
    rollout = engine.store.add_rollout("baseline", 9, {"name": f"rm{INVISIBLE}-rf"}, key="baseline/hidden")
    engine.store.started(rollout.key, "r-hidden")
    app = TracewatchApp(engine)
    async with app.run_test(size=(200, 60)) as pilot:
        rows = await started(pilot, rows=15)
        await select(pilot, "baseline/hidden")
        cell = rows.cell_text("baseline/hidden", "task")
        assert not set(INVISIBLE) & set(cell)
        assert "rm\\u200b\\u200c\\u200d\\u200e" in cell
        shot = svg_text(svg(app, tmp_path, "invisible"))
        assert not set(INVISIBLE) & set(shot)
        assert "rm\\u200b" in shot


async def test_g_and_G_go_to_the_first_and_last_rows() -> None:
    """Home/End and g/G move rows, not columns."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 40)) as pilot:
        rows = await started(pilot)
        for key, row in (("G", -1), ("g", 0), ("end", -1), ("home", 0)):
            await pilot.press(key)
            await until(pilot, lambda row=row: app.selected == rows.ordered_keys[row])
            assert rows.scroll_x == 0


async def test_the_selection_stays_on_a_rollout_that_leaves_the_filtered_view() -> None:
    """Rows leaving a `status:running` view never move the selection;
    the selected one leaving is said, and its trace stays until the user moves."""
    engine = make_engine(finish=False)
    store = engine.store
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 40)) as pilot:
        rows = await started(pilot)
        await pilot.press("slash", *"status:running", "enter")
        await select(pilot, "candidate/run1/0")
        title = app.query_one("#trace-title", Static)
        for key in ("baseline/run0/0", "baseline/run1/0", "candidate/run0/0"):  # others end around it
            store.failed(key, "done elsewhere")
        await until(pilot, lambda: "baseline/run1/0" not in rows.ordered_keys)
        assert app.selected == "candidate/run1/0" and rows.selected_key == "candidate/run1/0"
        store.failed("candidate/run1/0", "provider error")
        await until(pilot, lambda: "not in the filtered view" in str(title.render()))
        assert app.selected == "candidate/run1/0" and app.trace_pane.rollout.key == "candidate/run1/0"
        assert rows.pinned and "candidate/run1/0" not in rows.ordered_keys
        store.failed("baseline/run2/0", "done elsewhere")  # another row leaves: the table syncs again
        await until(pilot, lambda: "baseline/run2/0" not in rows.ordered_keys)
        assert app.selected == "candidate/run1/0", "nothing moves it but the user"
        await pilot.press("down")
        await until(pilot, lambda: app.selected == rows.ordered_keys[rows.cursor_row] != "candidate/run1/0")
        assert not rows.pinned and "not in the filtered view" not in str(title.render())


@pytest.mark.parametrize("width", [80, 160])
async def test_every_column_shows_its_sort_arrow_both_ways(width: int) -> None:
    """The arrow is never clipped, and ▼ marks a reversed sort."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(width, 40)) as pilot:
        rows = await started(pilot)
        for column in COLUMNS:
            if column.key not in rows.columns_shown:  # a narrow table leaves some out
                continue
            for reverse, arrow in ((False, "▲"), (True, "▼")):
                rows.sort_by(column.key, reverse=reverse)
                header = rows._header_strip().text
                assert f"{column.header}{arrow}" in header or f"…{arrow}" in header, header
                assert header.count(arrow) == 1 and "▲▼".replace(arrow, "") not in header


async def test_a_tall_pending_block_keeps_its_header_in_sight() -> None:
    """The bottom of a preview taller than the view still shows
    "pending · sent to the model, awaiting reply" on the top line."""
    engine = make_engine(finish=False)
    store = engine.store
    rollout = store.add_rollout("baseline", 9, {"name": "tall"}, key="baseline/tall")
    store.started(rollout.key, "r-tall")
    lines = "\n".join(f"line {i}" for i in range(80))
    store.apply_delta(rollout.key, {"trace": "t-tall", "open": {"id": "t-tall"}, "pending": [{"role": "user", "content": lines}]})
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, rows=15)
        await select(pilot, "baseline/tall")
        transcript = app.trace_pane.transcript
        await until(pilot, lambda: transcript.max_scroll_y > 0 and transcript.scroll_y == transcript.max_scroll_y)
        top = transcript.render_line(0).text
        assert top.startswith("┏━ pending · sent to the model, awaiting reply · "), top
        assert "line 79" in "".join(transcript.render_line(y).text for y in range(transcript.scrollable_content_region.height))


async def test_a_stalled_rollouts_activity_shows_its_duration() -> None:
    """A stalled rollout's activity read "⚠ stalled gener…", cutting the time; the time comes first now."""
    engine = make_engine(finish=False)
    engine.store.cap_stall(0.0)
    app = TracewatchApp(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        rows = await started(pilot)
        key = next(k for k in rows.ordered_keys if engine.store.rollouts[k].stalled(engine.store.clock(), 0.0))
        width = BY_KEY["activity"].width
        shown = fit(rows.cell_text(key, "activity"), width)
        assert re.match(r"⚠ \d+:\d\d ", shown), shown


async def test_the_status_line_counts_dropped_frames() -> None:
    """A dropped frame may hide part of a trace: the user is told, not only the log."""
    engine = make_engine()
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        status = app.query_one("#status", Static)
        assert "dropped" not in str(status.render())
        engine.store.dropped_frame("baseline", "an unreadable delta")
        engine.store.dropped_frame("candidate", "a reply for a run it no longer holds")
        await until(pilot, lambda: "2 frames dropped" in str(status.render()))


async def test_quitting_a_proxy_asks_first_and_says_the_drivers_lose_their_route() -> None:
    engine = make_engine()
    engine.quit_warning = "drivers pointed at tcp://127.0.0.1:6000 lose their route to tcp://127.0.0.1:5000"
    engine.variants["baseline"].cancel_unavailable = "the env server behind a proxy is not ours to stop"
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        await select(pilot, "baseline/run0/0")
        await pilot.press("x")
        await until(pilot, lambda: any("not ours to stop" in n.message for n in app._notifications))
        assert not isinstance(app.screen, ConfirmScreen) and engine.variants["baseline"].calls == []
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "lose their route" in str(app.screen.question)
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert engine.shutdowns == 0
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: app.return_code == 0)
    assert engine.shutdowns == 1


async def test_rows_of_one_task_are_numbered_and_a_second_start_is_its_own_run() -> None:
    """The rollout number (and run) tells rows of one task apart;
    the card counts this start's rollouts, not every start's summed."""
    engine = make_engine(variants=("baseline",), copies=2)
    store = engine.store
    again = [store.add_rollout("baseline", 0, {"name": "again"}, index, key=f"baseline/again/{index}", run=2) for index in (0, 1)]
    store.started(again[0].key, "r-again")
    store.apply_delta(again[0].key, {"trace": "t-again", "open": {"id": "t-again"}})  # its trace: running, not waiting
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 40)) as pilot:
        rows = await started(pilot, rows=16)
        assert [rows.cell_text(f"baseline/run0/{copy}", "number") for copy in (0, 1)] == ["1", "2"]
        assert [rows.cell_text(r.key, "number") for r in again] == ["2:1", "2:2"]
        await until(pilot, lambda: "start 2: run 1  done 0  fail 0  cxl 0" in str(app.cards["baseline"].body.render()))


async def test_80x24_is_laid_out_on_purpose(tmp_path: Path) -> None:
    """Help and quit stay in the footer, cards take two rows, the
    table shows its columns by priority with no horizontal scroll, the status names
    the recording, and the timing rows carry their variant's p50/p95."""
    engine = make_engine(session_dir=tmp_path)
    engine.recording_path = tmp_path / "a-long-folder-name" / "20261130-110457-4242.twrec"
    app = TracewatchApp(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        rows = await started(pilot)
        await select(pilot, "baseline/run1/0")
        shot = svg_text(app.export_screenshot())
        assert "? Help" in shot.replace("&#160;", " ") or ("Help" in shot and "Quit" in shot)
        assert all(card.size.height == 2 for card in app.cards.values())
        assert {"variant", "task", "phase", "activity", "reward", "elapsed", "errors"} <= set(rows.columns_shown)
        assert rows.virtual_size.width <= rows.scrollable_content_region.width, "no horizontal scroll"
        status = str(app.query_one("#status", Static).render())
        assert "rec 20261130-110457-4242.twrec" in status
        await pilot.press("2")
        await until(pilot, lambda: "p50/p95" in str(app.timing.render().renderables[1]))


async def test_search_within_a_transcript() -> None:
    """`/` in the trace searches it; n/N jump between matches; Esc clears."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 30)) as pilot:
        await started(pilot)
        await select(pilot, "baseline/run1/0")
        await pilot.press("enter")
        transcript = app.trace_pane.transcript
        await until(pilot, lambda: app.focused is transcript)
        title = app.query_one("#trace-title", Static)
        await pilot.press("slash", *"CHECK")
        await until(pilot, lambda: " · search " in str(title.render()))
        total = len(transcript._matches)
        assert total >= 2 and app.table.row_filter == RowFilter(), "the table's filter is untouched"
        at = transcript._match_at
        shown = transcript._matches[at]
        assert transcript.scroll_offset.y <= shown < transcript.scroll_offset.y + transcript.scrollable_content_region.height
        assert f"search {at + 1}/{total} (n/N)" in str(title.render())
        await pilot.press("enter", "n")
        await until(pilot, lambda: f"search {(at + 1) % total + 1}/{total}" in str(title.render()))
        await pilot.press("N", "N")
        await until(pilot, lambda: f"search {(at - 1) % total + 1}/{total}" in str(title.render()))
        await pilot.press("slash", "escape")
        await until(pilot, lambda: "search" not in str(title.render()) and app.focused is transcript)


async def test_leaving_a_multi_trace_rollout_for_a_single_trace_one() -> None:
    """The switcher goes with the multi-trace rollout; the next one shows its trace
    (found by screenshots/make.py: the old switcher was handed the new trace)."""
    engine, rollout = engine_with_a_multi_trace_rollout()
    store = engine.store
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, rows=15)
        await select(pilot, "baseline/multi")
        await until(pilot, lambda: app.trace_pane.switcher is not None)
        await select(pilot, "baseline/run1/0")
        await until(pilot, lambda: app.trace_pane.switcher is None and not app.query("#trace-switcher"))
        assert app.trace_pane.trace_id == next(iter(store.rollouts["baseline/run1/0"].traces))
        await select(pilot, "baseline/multi")
        await until(pilot, lambda: app.trace_pane.switcher is not None)


async def test_a_typed_filter_moves_the_selection_onto_a_row_it_shows() -> None:
    """`c` after `/stuck` cancels a row the user sees, never the hidden one that was
    selected before (found by the terminal test); only a row leaving by itself pins."""
    engine = make_engine(finish=False)
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 40)) as pilot:
        rows = await started(pilot)
        await select(pilot, "baseline/run0/0")
        await pilot.press("slash", *"variant:cand", "enter")
        await until(pilot, lambda: app.selected is not None and app.selected.startswith("candidate/"))
        assert not rows.pinned
        await pilot.press("c")
        assert engine.cancelled == [app.selected]


async def test_the_trace_pane_ends_on_the_row_the_cursor_rests_on() -> None:
    """Quick moves repaint the cursor on each row; the transcript loads once the cursor
    rests, and it is the rollout under the cursor then, not one passed on the way."""
    app = TracewatchApp(make_engine(finish=False))
    async with app.run_test(size=(160, 40)) as pilot:
        rows = await started(pilot)
        await select(pilot, rows.ordered_keys[0])
        await pilot.press(*["down"] * 5, "up")
        rested = rows.ordered_keys[4]
        assert rows.selected_key == rested and app.selected == rested
        await until(pilot, lambda: app.trace_pane.rollout is app.store.rollouts[rested], f"{rested} to be shown")


async def test_a_reason_that_starts_with_the_phase_takes_its_place_in_the_title() -> None:
    """A rollout cancelled with its variant read "· cancelled · cancelled with the
    variant" in the trace's title (the README's cancel screenshot)."""
    engine = make_engine()
    rollout = engine.store.add_rollout("baseline", 0, {"name": "stuck"}, 7)
    engine.store.started(rollout.key, "r-stuck")
    engine.store.failed(rollout.key, "cancelled with the variant", cancelled=True)
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count > 1)
        app.table.select(rollout.key)
        title = await until(pilot, lambda: t if "with the variant" in (t := str(app.trace_pane._title_line.render())) else None, what=lambda: str(app.trace_pane._title_line.render()))
        assert title.count("cancelled") == 1, title
