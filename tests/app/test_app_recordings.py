"""The app over a replayed and an opened recording (the real sessions, on a recording
written by the real Recorder from the recorded verifiers 0.4.0 stream)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Group
from rich.text import Text
from textual.widgets import Button, Static

from tests.support.app_screen import card_text, screen_text
from tests.support.polling import until, while_moving
from tests.support.tui_standin import make_engine, write_many_runs, write_recording
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.engine.replay import ReplaySession
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views.logs_view import LogLines, LogsView


async def test_a_replay_shows_its_variants_position_and_state(tmp_path: Path) -> None:
    """Cards for the recorded variants (model and sampling
    included), the position and play state on the status line, logs that say why
    they are empty."""
    path = tmp_path / "session.twrec"
    write_recording(path)
    session = ReplaySession(path, speed=0)
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: session.finished and set(app.cards) == {"baseline", "candidate"})
        status = app.query_one("#status", Static)
        await until(pilot, lambda: session.total is not None)  # counted by a thread
        total = session.position().total
        await until(pilot, lambda: f"replay ■ ended 0:30 / 0:30 · {total:,} / {total:,} records" in str(status.render()))
        await until(pilot, lambda: "temperature=0.8" in card_text(app.cards["candidate"]))
        assert "demo-model" in card_text(app.cards["baseline"]) and "temperature=0.2" in card_text(app.cards["baseline"])
        await pilot.press("3")
        log = app.query_one(LogsView).query_one(LogLines)
        await until(pilot, lambda: any("not part of a recording" in line for line in log.lines))
        assert app.query_one(LogsView).shown == "baseline"


async def test_a_replay_at_full_speed_is_drawn_at_every_third_tick_and_its_end_at_once(tmp_path: Path) -> None:
    """It moves faster than it can be read: the rows follow it ten times a second, so
    the CPU goes to the replay; paused or ended, every tick draws again."""
    path = tmp_path / "many.twrec"
    write_many_runs(path, 150)
    session = ReplaySession(path, speed=0)
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        drawn: list[tuple[int, bool]] = []
        sync = app.table.sync
        app.table.sync = lambda keys: (drawn.append((app._ticks, session.fast)), sync(keys))[1]  # type: ignore[method-assign]
        # the deadline is for progress: a loaded box takes longer than MARGIN over the whole replay
        await while_moving(lambda: session.finished, lambda: session.applied, lambda: f"the replay to end; {session.applied:,} records applied", pilot.pause)
        ended = app._ticks
        await until(pilot, lambda: any(tick > ended for tick, _ in drawn), lambda: f"a tick after the end (tick {ended}) to draw; drawn at {drawn[-5:]}")
        while_fast = [tick for tick, fast in drawn if fast]
        assert while_fast and all(tick % 3 == 0 for tick, fast in drawn if fast)
        assert not drawn[-1][1] and app.table.row_count == len(session.store.rollouts)


async def test_a_paused_replay_says_so_and_steps(tmp_path: Path) -> None:
    path = tmp_path / "session.twrec"
    write_recording(path)
    session = ReplaySession(path, speed=0.001)  # slow enough to pause before the end
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: session.applied > 0)
        await pilot.press("space")
        status = app.query_one("#status", Static)
        await until(pilot, lambda: "replay ⏸ paused" in str(status.render()))
        before = session.applied
        await pilot.press("n")
        await until(pilot, lambda: session.total is not None and f"{before + 1:,} / {session.total:,} records" in str(status.render()))


async def test_an_opened_recording_needs_no_selection_to_show_its_rows(tmp_path: Path) -> None:
    """On screen, unselected rows show their recorded values."""
    path = tmp_path / "session.twrec"
    write_recording(path)
    session = OpenedRecording(path)
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == len(session.store.rollouts))
        key = "candidate/run1"
        assert key not in session.loaded
        shown = {column: app.table.cell_text(key, column) for column in ("phase", "turns", "tokens", "reward", "elapsed")}
        assert shown["phase"] != "starting" and shown["turns"] != "0" and shown["tokens"] != "0"
        session.select(key)
        assert {column: app.table.cell_text(key, column) for column in shown} == shown


async def test_a_recording_opened_for_the_screen_fills_its_table_as_its_index_reads_on(tmp_path: Path) -> None:
    """`tracewatch open` draws its first screen before the file is indexed (the
    session starts with the header read): keys work while the index reads on, and
    the table, the status line and Compare end as an index read at once shows them."""
    path = tmp_path / "many.twrec"
    write_many_runs(path, 60)
    whole = OpenedRecording(path)
    session = OpenedRecording(path, at_once=False)
    assert not session.store.rollouts
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("4", "down", "down")
        await until(
            pilot,
            lambda: session.store.partial is None and app.table.row_count == len(whole.store.rollouts),
            lambda: f"the index read: partial {session.store.partial!r}, {app.table.row_count} of {len(whole.store.rollouts)} rows",
        )
        status = app.query_one("#status", Static)
        # Compare redraws on its own refresh after the index ends: wait for the screen it ends on
        await until(
            pilot,
            lambda: "indexing" not in str(status.render()) and "partial" not in (shown := screen_text(app)) and "variants disagree" in shown,
            lambda: f"the screen as an index read at once shows it; it shows:\n{screen_text(app)}",
        )
        row = lambda r: (r.status, r.phase, r.turns, r.tokens, r.reward, r.errors)  # noqa: E731
        assert [row(r) for r in session.store.rollouts.values()] == [row(r) for r in whole.store.rollouts.values()]
        assert app.detail.active == "tab-compare"


async def test_a_partial_store_says_so_on_the_status_line_in_compare_and_beside_the_phases_p50_p95() -> None:
    """Figures over every rollout are partial while a recording is still indexed."""
    engine = make_engine()
    engine.store.partial = "indexing 34%"
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        status = app.query_one("#status", Static)
        await until(pilot, lambda: "indexing 34%" in str(status.render()))
        await pilot.press("4")
        await until(pilot, lambda: first_line(app.compare.render()) == "partial: indexing 34%; the comparison fills in as it reads")
        await pilot.press("2")
        await until(pilot, lambda: app.timing.render().renderables[2].plain.endswith("(finished rollouts) · partial: indexing 34%"))
        engine.store.partial = None
        engine.store.touch_variant("baseline")
        await until(pilot, lambda: "indexing" not in str(status.render()) and "partial" not in app.timing.render().renderables[2].plain)
        assert "partial" not in first_line(app.compare.render())


def first_line(shown: object) -> str:
    """The first line of what a view renders (a Group's first part)."""
    first = shown.renderables[0] if isinstance(shown, Group) else shown
    return first.plain.splitlines()[0] if isinstance(first, Text) else ""


async def test_the_focused_card_is_marked_and_cards_show_what_differs() -> None:
    """Focus is a glyph as well as a shade; the differing
    sampling is bold."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        card = app.cards["candidate"]
        await until(pilot, lambda: "temperature=0.8" in card_text(card))
        assert "▶" not in card_text(card)
        card.focus()
        await until(pilot, lambda: card_text(card).startswith("▶ candidate"))
        assert not card_text(app.cards["baseline"]).startswith("▶")
        body = card.body.render()
        bold = {body.plain[span.start : span.end] for span in body.spans if "bold" in str(span.style)}
        assert "temperature=0.8" in bold and "demo-model" not in bold
        app.table.focus()
        await until(pilot, lambda: not card_text(card).startswith("▶"))


async def test_an_opened_recording_offers_no_start_or_cancel(tmp_path: Path) -> None:
    """Nothing runs in an opened recording: its cards show no Start and Cancel buttons,
    and the status line says why."""
    path = tmp_path / "session.twrec"
    write_recording(path)
    session = OpenedRecording(path)
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == len(session.store.rollouts) and "read-only" in screen_text(app))
        assert not [button for button in app.query(Button) if button.display and button.has_class("start", "cancel")]
        shown = screen_text(app)
        assert "Start" not in shown and "Cancel" not in shown
