"""A followed prime-rl run on screen keeps its finished episodes as columns, not
rollouts (`FollowedRun(columns=True)`, as `tracewatch open RUN` runs it): in the real
app (run_test) on a run prime-rl's orchestrator and trainer write on a thread
(`RunWriter`), the history read before any was seen live stays rows of the columns,
the episodes seen in flight turn into finished rows, every episode is one row, a
filter and a sort take both kinds together, and an episode opened from the columns
shows its transcript with the cursor still on it."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import numpy as np
import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from tests.app.test_prime_rl_followed import by_key as written
from tests.app.test_prime_rl_followed import layout_of
from tests.support.polling import until, wait_until
from tests.support.prime_rl_orchestrator import RunWriter, Script
from tracewatch.core.engine.followed_run import FollowedRun
from tracewatch.core.recordings.prime_rl import steps
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.table import finished_index
from tracewatch.tui.table.rollouts_table import RolloutsTable


def history(tmp_path, script: Script) -> tuple[RunWriter, FollowedRun, TracewatchApp]:
    """A run written whole before it is opened (nothing seen live), opened as the app
    opens it."""
    writer = RunWriter(tmp_path / "out", script)
    writer.run()
    assert writer.error is None
    session = FollowedRun(layout_of(tmp_path / "out"), follow=False, columns=True)
    return writer, session, TracewatchApp(session)


async def every_row(pilot, app: TracewatchApp, writer: RunWriter) -> None:
    table = app.table
    await until(pilot, lambda: table.row_count == len(writer.landed), lambda: f"a row for each of the {len(writer.landed)} episodes; {table.row_count} shown")


async def test_history_stays_columns_live_rows_finish_in_place_and_a_filter_and_sort_take_both(tmp_path):
    writer = RunWriter(tmp_path / "out", Script(episodes=30, concurrent=4, pause=0.05)).start()
    wait_until(lambda: len(writer.landed) >= 8, timeout=60, what="a history of eight episodes before the viewer opens the run")
    session = FollowedRun(layout_of(tmp_path / "out"), columns=True)
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.table

        def whole() -> bool:
            return writer.done.is_set() and table.row_count == len(writer.landed) and all(r.status.finished for r in session.store.rollouts.values())

        await until(pilot, whole, lambda: f"a finished row for each episode; writer done {writer.done.is_set()}, {len(writer.landed)} landed, {table.row_count} rows", timeout=120)
        writer.join()
        episodes = written(writer)
        keys = table.ordered_keys
        rows = {key: episodes[key.rsplit("/", 1)[1]] for key in keys}
        assert len(keys) == len(set(keys)) and len({id(rollout) for rollout in rows.values()}) == len(writer.landed), "every episode once"
        assert session.rows is not None
        columns_only = [key for key in keys if key not in session.store.rollouts]
        seen_live = [key for key in keys if key.rsplit("/", 1)[1].startswith("d-")]
        assert columns_only and seen_live, (len(columns_only), len(seen_live))
        assert all(key in session.store.rollouts for key in seen_live), "an episode seen in flight is its rollout, finished"
        assert len(session.store.rollouts) < len(keys), "the history was not made rollouts"
        for key, rollout in rows.items():
            assert table.cell_text(key, "reward") == f"{rollout.reward:.2f}", key  # type: ignore[attr-defined]
            assert table.cell_text(key, "variant") == f"{rollout.kind}:{rollout.env}"  # type: ignore[attr-defined]
            assert table.cell_text(key, "phase") == "done"

        # a filter over both kinds of row, then a sort over what it lets through
        wanted = sorted(key for key, rollout in rows.items() if rollout.reward > 0.5)  # type: ignore[attr-defined]
        assert 0 < len(wanted) < len(rows)
        await pilot.press("slash", *"reward:>0.5", "enter")
        await until(pilot, lambda: sorted(table.ordered_keys) == wanted, lambda: f"reward:>0.5 to show {wanted}; it shows {sorted(table.ordered_keys)}")
        assert any(key in columns_only for key in wanted) and any(key in seen_live for key in wanted)
        table.sort_by("reward", reverse=True)
        shown = [float(table.cell_text(key, "reward")) for key in table.ordered_keys]
        assert shown == sorted(shown, reverse=True) and len(shown) == len(wanted)
        table.set_filter(RowFilter())
        await until(pilot, lambda: table.row_count == len(rows), lambda: f"every row back; {table.row_count} shown")
        turns = [int(table.cell_text(key, "turns")) for key in table.ordered_keys]
        table.sort_by("turns")
        turns = [int(table.cell_text(key, "turns")) for key in table.ordered_keys]
        assert turns == sorted(turns)
    await session.shutdown()


async def test_an_episode_opened_from_the_columns_shows_its_transcript_where_its_row_was(tmp_path):
    writer, session, app = history(tmp_path, Script(episodes=12, concurrent=4, ship_every=3))
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.table
        await every_row(pilot, app, writer)
        assert not session.store.rollouts, "nothing was seen live: every row is the columns'"
        await until(pilot, lambda: f" {len(writer.landed)} rollouts" in str(app.query_one("#status", Static).render()), "the status line counts every episode")
        table.sort_by("reward")
        key = table.ordered_keys[5]
        reward = table.cell_text(key, "reward")
        table.focus()
        table.select(key)
        await pilot.press("enter")
        rollout = await until(pilot, lambda: (r := session.store.rollouts.get(key)) is not None and r.traces and r, f"the episode {key} opened, its record read")
        (trace,) = rollout.traces.values()
        await until(pilot, lambda: app.trace_pane.transcript.trace_state is trace, f"{key}'s transcript shown")
        assert table.selected_key == key and table.get_row_index(key) == 5, "the cursor stays on the episode, in its place"
        assert table.row_count == len(writer.landed), "the opened row is its rollout now, not a second row"
        assert table.cell_text(key, "reward") == reward
    await session.shutdown()


async def test_a_big_sort_draws_its_first_screen_at_once_and_every_row_once_sorted_off_the_loop(tmp_path, monkeypatch):
    """A sort of many rows puts the first screen's in order at once and the rest in
    a thread (`finished_index`; here "many" is made small)."""
    monkeypatch.setattr("tracewatch.tui.table.finished_index.PARTIAL_FROM", 4)
    monkeypatch.setattr("tracewatch.tui.table.finished_index.FIRST_SCREEN", 3)
    writer, session, app = history(tmp_path, Script(episodes=16, concurrent=4))
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.table
        await every_row(pilot, app, writer)
        rewards = sorted(rollout.reward for rollout in writer.landed)  # type: ignore[attr-defined]
        table.sort_by("reward", reverse=True)
        first = [float(table.cell_text(key, "reward")) for key in table.ordered_keys[:3]]
        assert first == [round(reward, 2) for reward in rewards[::-1][:3]], "the first screen is in order before the rest"
        shown = lambda: [float(table.cell_text(key, "reward")) for key in table.ordered_keys]  # noqa: E731
        await until(pilot, lambda: shown() == [round(reward, 2) for reward in rewards[::-1]], lambda: f"every row in order; {shown()}")
        assert table.row_count == len(writer.landed)
    await session.shutdown()


async def test_sort_keys_pressed_in_a_row_sort_the_rest_of_the_rows_once(tmp_path, monkeypatch):
    """Each big sort's first screen is drawn at once; the rest of its rows are sorted
    off the loop only once the keys stop (`REST_AFTER`, made long here so that a loaded
    box's slow frames still fall within it): the sorts the next key throws away never
    take a core."""
    monkeypatch.setattr("tracewatch.tui.table.finished_index.PARTIAL_FROM", 4)
    monkeypatch.setattr("tracewatch.tui.table.finished_index.FIRST_SCREEN", 3)
    monkeypatch.setattr("tracewatch.tui.table.rollouts_table.REST_AFTER", 3.0)
    sorts, full_order = [], finished_index.full_order
    monkeypatch.setattr(finished_index, "full_order", lambda *args: sorts.append(args) or full_order(*args))
    writer, session, app = history(tmp_path, Script(episodes=16, concurrent=4))
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.table
        await every_row(pilot, app, writer)
        for column, reverse in (("reward", False), ("turns", True), ("reward", True)):
            table.sort_by(column, reverse)
            await pilot.pause()
        rewards = sorted((rollout.reward for rollout in writer.landed), reverse=True)  # type: ignore[attr-defined]
        shown = lambda: [float(table.cell_text(key, "reward")) for key in table.ordered_keys]  # noqa: E731
        await until(pilot, lambda: shown() == [round(reward, 2) for reward in rewards], lambda: f"every row in order; {shown()}")
        assert len(sorts) == 1, "one sort of the rest: the last key's"
    await session.shutdown()


async def test_a_big_sort_pending_while_rows_change_sorts_the_rest_once(tmp_path, monkeypatch):
    """Every tick that met the sort's rest pending while rows changed timed another
    start of it: several sorts of every row at once (here the sort is held until the
    ticks have had their chance, then let go)."""
    monkeypatch.setattr("tracewatch.tui.table.finished_index.PARTIAL_FROM", 4)
    monkeypatch.setattr("tracewatch.tui.table.finished_index.FIRST_SCREEN", 3)
    monkeypatch.setattr("tracewatch.tui.table.rollouts_table.REST_AFTER", 0.1)
    sorts, held, full_order = [], threading.Event(), finished_index.full_order

    def slow(*args):
        sorts.append(args)
        held.wait(30)
        return full_order(*args)

    monkeypatch.setattr(finished_index, "full_order", slow)
    writer, session, app = history(tmp_path, Script(episodes=16, concurrent=4))
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            table = app.table
            await every_row(pilot, app, writer)
            assert session.rows is not None
            table.sort_by("reward", True)
            await until(pilot, lambda: len(sorts) == 1, "the rest's sort started")
            for row in range(6):  # an annotation a tick, while the sort runs
                session.rows.changed(np.array([row], dtype=np.int64))
                await pilot.pause(0.1)
            await pilot.pause(0.3)  # the ticks' timers, had they been set, fire by now
            held.set()
            rewards = sorted((rollout.reward for rollout in writer.landed), reverse=True)  # type: ignore[attr-defined]
            shown = lambda: [float(table.cell_text(key, "reward")) for key in table.ordered_keys]  # noqa: E731
            await until(pilot, lambda: shown() == [round(reward, 2) for reward in rewards], lambda: f"every row in order; {shown()}")
            assert len(sorts) == 1, f"{len(sorts)} sorts of the rest for one key"
    finally:
        held.set()
    await session.shutdown()


async def test_a_row_changed_just_before_a_sort_key_is_drawn_with_its_change(tmp_path):
    """A sort's build took in the rows' changes since the last look but kept their
    drawn lines: the row showed its old reward until the theme changed."""
    writer, session, app = history(tmp_path, Script(episodes=8, concurrent=4))
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.table
        await every_row(pilot, app, writer)
        assert session.rows is not None
        for y in range(table.row_count + 1):
            table.render_line(y)  # every row drawn, and its line kept
        key = next(key for key in reversed(table.ordered_keys) if key not in session.store.rollouts and key != table.selected_key)
        row = session.rows.row_of(key)
        assert row is not None
        session.run.table.column("reward")[row] = 0.375
        session.rows.changed(np.array([row], dtype=np.int64))
        table.sort_by("turns")  # before a tick looks at the change
        header = table.render_line(0).text
        line = table.render_line(table.ordered_keys.index(key) + 1).text
        assert line[header.index("Reward") - 1 :].split()[0] == "0.38", line
    await session.shutdown()


@pytest.mark.parametrize("size", [(100, 30), (120, 30), (200, 40)])
async def test_a_training_run_s_variant_reads_whole_and_its_used_column_stays_at_common_widths(tmp_path, size):
    """`train:gsm8k` was cut to `train:gsm8` and Used was the first column dropped."""
    writer, session, app = history(tmp_path, Script(episodes=8, concurrent=4, ship_every=2))
    async with app.run_test(size=size) as pilot:
        table = app.table
        await every_row(pilot, app, writer)
        await pilot.pause()
        assert "used" in table.columns_shown, table.columns_shown
        names = {f"{rollout.kind}:{rollout.env}" for rollout in writer.landed}  # type: ignore[attr-defined]
        assert "train:gsm8k" in names
        lines = [table.render_line(y).text for y in range(1, table.row_count + 1)]  # the rows as drawn
        for name in names:
            assert any(line.startswith(f"{name} ") for line in lines), (name, lines)
    await session.shutdown()


def steps_held_back(tmp_path, monkeypatch) -> tuple[RunWriter, FollowedRun, dict[str, bool]]:
    """A finished run of 12 episodes followed with the reading of its records' steps held
    back until the test sets `reading["open"]`."""
    writer = RunWriter(tmp_path / "out", Script(episodes=12, concurrent=4, ship_every=3))
    writer.run()
    assert writer.error is None
    reading, scan = {"open": False}, FollowedRun._scan_steps
    monkeypatch.setattr(FollowedRun, "_scan_steps", lambda self: scan(self) if reading["open"] else False)
    return writer, FollowedRun(layout_of(tmp_path / "out"), columns=True), reading


@asynccontextmanager
async def history_with_steps_held_back(tmp_path, monkeypatch) -> AsyncIterator[tuple[Pilot, RolloutsTable, dict[str, bool], dict]]:
    """`steps_held_back` opened in the app, every row in: the pilot, the table, the
    reading's gate and the written episodes by id."""
    writer, session, reading = steps_held_back(tmp_path, monkeypatch)
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 40)) as pilot:
        await every_row(pilot, app, writer)
        yield pilot, app.table, reading, written(writer)
    await session.shutdown()


async def test_steps_learnt_from_the_records_are_drawn_on_the_rows_already_shown(tmp_path, monkeypatch):
    """The history's steps are read from its records once the run is caught up: a row
    drawn before its step was known is drawn again with it. (Here the reading waits
    until every row was drawn once, with the steps the orchestrator's shipping gave.)"""
    async with history_with_steps_held_back(tmp_path, monkeypatch) as (pilot, table, reading, episodes):
        await until(pilot, lambda: "step" in table.columns_shown, "the Step column, from the shipped steps")
        for y in range(table.row_count + 1):
            table.render_line(y)
        reading["open"] = True

        def drawn() -> dict[str, str]:
            header = table.render_line(0).text
            at = header.index("Step")
            return {key: table.render_line(y + 1).text[at - 1 : at + 6].strip() for y, key in enumerate(table.ordered_keys)}

        wanted = {key: str(episodes[key.rsplit("/", 1)[1]].step) for key in table.ordered_keys}  # type: ignore[attr-defined]
        await until(pilot, lambda: "step" in table.columns_shown and drawn() == wanted, lambda: f"each row drawn with its step; these differ: {[(k, v, wanted[k]) for k, v in drawn().items() if v != wanted[k]]}")


async def test_a_sort_again_by_a_column_takes_the_rows_changed_since_its_last_sort(tmp_path, monkeypatch):
    """A big sort keeps its column's keys for the next sort by it (`FinishedIndex`):
    steps read from the records after the first sort by Step are in the second's order."""
    monkeypatch.setattr("tracewatch.tui.table.finished_index.PARTIAL_FROM", 4)
    monkeypatch.setattr("tracewatch.tui.table.finished_index.FIRST_SCREEN", 3)
    async with history_with_steps_held_back(tmp_path, monkeypatch) as (pilot, table, reading, episodes):
        table.sort_by("step", reverse=True)
        table.sort_by("reward")
        reading["open"] = True
        wanted = {key: episodes[key.rsplit("/", 1)[1]].step for key in table.ordered_keys}  # type: ignore[attr-defined]
        await until(pilot, lambda: all(table.cell_text(key, "step") == str(step) for key, step in wanted.items()), "every row's step read from its record")
        table.sort_by("step", reverse=True)
        steps = lambda: [wanted[key] for key in table.ordered_keys]  # noqa: E731
        assert sorted(steps()[:3], reverse=True) == steps()[:3] == sorted(wanted.values(), reverse=True)[:3], "the first screen by the steps read"
        await until(pilot, lambda: steps() == sorted(wanted.values(), reverse=True), lambda: f"every row by the steps read; {steps()}")


async def test_a_task_a_record_names_without_a_step_moves_its_row_in_the_next_sort_by_task(tmp_path, monkeypatch):
    """The steps' reading told the table of the rows that got a step, not of those whose
    record named only their task: a sort by Task again kept their old keys (`task N`)
    where the names were known already (no new name, so no new ranks). Here the records
    hold no step and name two tasks; the reading is let through a slice at a time."""
    monkeypatch.setattr("tracewatch.tui.table.finished_index.PARTIAL_FROM", 4)
    monkeypatch.setattr("tracewatch.tui.table.finished_index.FIRST_SCREEN", 3)
    monkeypatch.setattr("tracewatch.core.engine.followed_run.SCAN_SLICE", 6)
    monkeypatch.setattr(steps, "record_step", lambda record: None)
    named = steps.record_task
    monkeypatch.setattr(steps, "record_task", lambda record: f"t{int(str(named(record)).split()[-1]) % 2}")
    writer = RunWriter(tmp_path / "out", Script(episodes=12, concurrent=4, ship_every=3))
    writer.run()
    assert writer.error is None
    slices, scan = [0], FollowedRun._scan_steps

    def let_through(self: FollowedRun) -> bool:
        if not slices[0]:
            return False
        slices[0] -= 1
        return scan(self)

    monkeypatch.setattr(FollowedRun, "_scan_steps", let_through)
    session = FollowedRun(layout_of(tmp_path / "out"), columns=True)
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.table
        await every_row(pilot, app, writer)
        finished = lambda: [table.cell_text(key, "task") for key in table.ordered_keys if key not in session.store.rollouts]  # noqa: E731
        slices[0] = 1
        await until(pilot, lambda: {"t0", "t1"} <= set(finished()), lambda: f"both names read from the first slice; {finished()}")
        table.sort_by("task", False)  # its keys kept, the ranks of both names made
        slices[0] = 1
        await until(pilot, lambda: all(text in ("t0", "t1") for text in finished()), lambda: f"every row's task read; {finished()}")
        table.sort_by("task", False)
        texts = lambda: [table.cell_text(key, "task") for key in table.ordered_keys]  # noqa: E731
        await until(pilot, lambda: texts() == sorted(texts()), lambda: f"the rows by the tasks read; {texts()}")
    await session.shutdown()


async def test_enter_shows_the_transcript_at_once_without_waiting_out_the_cursor_s_settle(tmp_path, monkeypatch):
    """Moving the cursor fast defers reading the row (`SETTLE`); Enter asks for it, so
    it is read and shown then (here the settle is made a minute long)."""
    monkeypatch.setattr("tracewatch.tui.app.SETTLE", 60.0)
    writer, session, app = history(tmp_path, Script(episodes=12, concurrent=4, ship_every=3))
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.table
        await every_row(pilot, app, writer)
        table.focus()
        await pilot.press("down", "down", "down")
        key = table.selected_key
        assert key is not None
        await pilot.press("enter")
        rollout = await until(pilot, lambda: (r := session.store.rollouts.get(key)) is not None and r.traces and r, f"the episode {key} opened, its record read")
        (trace,) = rollout.traces.values()
        await until(pilot, lambda: app.trace_pane.transcript.trace_state is trace, f"{key}'s transcript shown")
    await session.shutdown()


async def test_the_steps_reading_waits_while_the_user_is_at_the_keys(tmp_path, monkeypatch):
    """The records' steps are read in the loop between polls; a cursor moved, a sort key
    or a filter typed holds that reading off for `USER_PAUSE`, so an episode opened does
    not share the loop with it, nor a sort its rows' keys moving under it."""
    monkeypatch.setattr("tracewatch.core.engine.followed_run.USER_PAUSE", 0.8)
    writer = RunWriter(tmp_path / "out", Script(episodes=12, concurrent=4, ship_every=3))
    writer.run()
    assert writer.error is None
    events: list[tuple[str, float]] = []
    scan, busy = FollowedRun._scan_steps, FollowedRun.user_busy
    monkeypatch.setattr(FollowedRun, "_scan_steps", lambda self: events.append(("scan", time.monotonic())) or scan(self))
    monkeypatch.setattr(FollowedRun, "user_busy", lambda self: events.append(("busy", time.monotonic())) or busy(self))
    session = FollowedRun(layout_of(tmp_path / "out"), columns=True)
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.table
        await every_row(pilot, app, writer)
        table.focus()
        await pilot.press("down")
        await until(pilot, lambda: any(kind == "busy" for kind, _ in events), "the cursor's move told the session")
        last_busy = lambda: max(at for kind, at in events if kind == "busy")  # noqa: E731
        after = lambda: [at for kind, at in events if kind == "scan" and at > last_busy()]  # noqa: E731
        await until(pilot, after, lambda: f"the steps read again after the keys; {events[-6:]}")
        assert after()[0] - last_busy() >= 0.8, f"the reading waited out the pause; {events[-6:]}"
        for keys in (["o"], ["slash", "t", "enter"]):  # a sort key, a filter typed: the kept sort keys stay good
            told = len([kind for kind, _ in events if kind == "busy"])
            await pilot.press(*keys)
            await until(pilot, lambda told=told: len([kind for kind, _ in events if kind == "busy"]) > told, f"{keys} told the session")
    await session.shutdown()
