"""The rollouts table on its own: keyed rows, changed cells only, filter, sort, ticks."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from textual.strip import Strip

from tests.support.polling import until
from tests.support.tui_standin import TableApp, feed, queued_and_running
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.table.rollouts_table import RolloutsTable


def instrument(table: RolloutsTable) -> list[str]:
    """Record every row drawn from the store and forbid rebuilding the index."""
    drawn: list[str] = []
    row_strip = table._row_strip

    def counting(key, layer):
        drawn.append(key)
        return row_strip(key, layer)

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the table was rebuilt for a delta")

    table._row_strip = counting
    table.rebuild = no_rebuild
    return drawn


def draw(table: RolloutsTable) -> list[str]:
    """Every line on screen, as the compositor would ask for them."""
    return [table.render_line(y).text for y in range(table.scrollable_content_region.height)]


@pytest.fixture
def store() -> RolloutStore:
    store = RolloutStore()
    feed(store, "baseline", finish=False)
    feed(store, "candidate", finish=False)
    store.take_changes()
    return store


def column(table: RolloutsTable, name: str) -> list[str]:
    return [table.cell_text(key, name) for key in table.ordered_keys]


async def test_a_delta_redraws_only_its_row(store: RolloutStore) -> None:
    app = TableApp(store)
    async with app.run_test(size=(140, 30)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        assert table.row_count == 14
        draw(table)
        drawn = instrument(table)
        key = "candidate/run0/0"
        store.failed(key, "boom")
        table.sync(store.take_changes().rollouts)
        lines = draw(table)
        assert set(drawn) <= {key, table.selected_key} and key in drawn
        assert "error" in lines[1 + table.get_row_index(key)]


def record_lines(table: RolloutsTable) -> tuple[list[int], Callable[[int], Strip]]:
    """From now on, every line the compositor asks the table for (and the table's own
    `render_line`, to draw one without recording it)."""
    asked: list[int] = []
    render_line = table.render_line

    def recording(y: int) -> Strip:
        asked.append(y)
        return render_line(y)

    table.render_line = recording  # type: ignore[method-assign]
    return asked, render_line


async def test_a_delta_repaints_only_its_line_on_screen(store: RolloutStore) -> None:
    """The compositor is asked again for the changed row's line only: not the other
    rows, the header or the scrollbar (a whole repaint draws all of them)."""
    app = TableApp(store)
    async with app.run_test(size=(140, 12)) as pilot:
        table = app.query_one(RolloutsTable)
        table.rebuild()
        await until(pilot, lambda: "candidate" in "".join(draw(table)))
        await pilot.pause()
        asked, render_line = record_lines(table)
        key = table.ordered_keys[3]
        store.failed(key, "boom")
        table.sync(store.take_changes().rollouts)
        line = 1 + table.get_row_index(key)
        await until(pilot, lambda: line in asked)
        await pilot.pause()
        assert set(asked) == {line}
        assert "error" in render_line(line).text


async def test_a_cursor_move_repaints_its_two_lines_and_a_scroll_all(store: RolloutStore) -> None:
    app = TableApp(store)
    async with app.run_test(size=(140, 12)) as pilot:
        table = app.query_one(RolloutsTable)
        table.rebuild()
        table.focus()
        await until(pilot, lambda: "candidate" in "".join(draw(table)))
        await pilot.pause()
        asked, render_line = record_lines(table)
        await pilot.press("down")
        await until(pilot, lambda: 2 in asked)
        await pilot.pause()
        assert set(asked) == {1, 2} and table.cursor_row == 1
        asked.clear()
        height = table.scrollable_content_region.height
        await pilot.press(*["down"] * (height - 2))  # past the last row on screen: it scrolls
        await until(pilot, lambda: table.scroll_y > 0 and set(asked) >= set(range(height)))
        assert table.cursor_row - table.scroll_y + 1 == height - 1  # the cursor on the last line


async def test_a_burst_of_new_rows_joins_in_one_sync(store: RolloutStore) -> None:
    app = TableApp(store)
    async with app.run_test(size=(140, 30)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        table.select("baseline/run2/0")
        for i in range(1000):
            store.add_rollout("extra", 0, {"name": f"extra {i}"}, key=f"extra/{i}")
        table.sync(store.take_changes().added)
        assert table.row_count == 1014
        assert table.selected_key == "baseline/run2/0"
        drawn = instrument(table)
        draw(table)
        assert len(drawn) <= table.size.height  # drawing costs the rows on screen


async def test_filter_rebuilds_once_and_follows_changes(store: RolloutStore) -> None:
    app = TableApp(store)
    async with app.run_test(size=(140, 30)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        table.set_filter(RowFilter.parse("variant:cand status:running"))
        assert table.row_count == 7
        assert set(column(table, "variant")) == {"candidate"}
        store.failed("candidate/run1/0", "gone")
        table.sync(store.take_changes().rollouts)
        assert table.row_count == 6  # no longer running: leaves the filtered view
        table.set_filter(RowFilter.parse("17 * 23"))
        assert table.row_count == 6  # run0, error and cancel of both variants share the task


async def test_the_cursor_stays_on_its_rollout_through_filter_and_inserts(store: RolloutStore) -> None:
    app = TableApp(store)
    async with app.run_test(size=(140, 30)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        table.select("candidate/run2/0")
        table.set_filter(RowFilter.parse("variant:cand"))
        assert table.selected_key == "candidate/run2/0"
        table.sort_by("tokens")
        store.add_rollout("candidate", 0, {"name": "late"}, key="candidate/late")
        table.sync(store.take_changes().added)
        table.tick()  # the once-a-second re-sort
        assert "candidate/late" in table.ordered_keys
        assert table.selected_key == "candidate/run2/0"
        table.set_filter(RowFilter())
        assert table.selected_key == "candidate/run2/0" and table.row_count == 15


async def test_sort_by_column_keeps_the_selected_rollout(store: RolloutStore) -> None:
    app = TableApp(store)
    async with app.run_test(size=(140, 30)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        table.select("candidate/run2/0")
        table.sort_by("tokens")
        tokens = [int(t.replace(",", "")) for t in column(table, "tokens")]
        assert tokens == sorted(tokens)
        assert table.selected_key == "candidate/run2/0"
        table.sort_by("tokens")  # again: reversed
        tokens = [int(t.replace(",", "")) for t in column(table, "tokens")]
        assert tokens == sorted(tokens, reverse=True)
        assert table.header_label("tokens").strip() == "Tokens▼"


async def test_tick_redraws_only_running_rows_on_screen(store: RolloutStore) -> None:
    clock = [time.time()]
    store.clock = lambda: clock[0]
    for i in range(200):
        rollout = store.add_rollout("many", 0, {"name": f"t{i}"}, key=f"many/{i}")
        store.started(rollout.key, f"r{i}", t=clock[0])
        store.apply_delta(rollout.key, {"trace": f"t{i}", "open": {"id": f"t{i}"}}, clock[0])  # begun: it runs, not waits
    app = TableApp(store)
    async with app.run_test(size=(140, 20)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        table.sort_by("variant")
        draw(table)
        drawn = instrument(table)
        clock[0] += 5
        table.tick()
        lines = draw(table)
        assert 0 < len(drawn) <= table.size.height
        assert set(drawn) <= set(table.ordered_keys[: table.size.height])
        assert any("0:05" in line for line in lines)


def test_row_filter_parses_fields_and_words() -> None:
    parsed = RowFilter.parse("variant:base,cand status:running Foo")
    assert parsed == RowFilter(("base", "cand"), ("running",), (), ("foo",))
    assert not RowFilter.parse("  ")


async def test_rows_follow_the_theme(store: RolloutStore) -> None:
    """The table's own style is kept between draws, and a theme change draws every row
    and the blank lines under them in the new theme."""
    store.rollouts = dict(list(store.rollouts.items())[:3])  # blank lines below the rows
    app = TableApp(store)
    async with app.run_test(size=(140, 30)) as pilot:
        table = app.query_one(RolloutsTable)
        table.rebuild()
        await pilot.pause()
        row, blank = 2, table.scrollable_content_region.height - 1

        def backgrounds() -> list[object]:
            return [segment.style.bgcolor for y in (row, blank) for segment in table.render_line(y) if segment.style]

        dark = backgrounds()
        app.theme = "textual-light"
        await until(pilot, lambda: all(color not in dark for color in backgrounds()))


async def test_a_filter_changes_the_row_count_without_laying_the_screen_out() -> None:
    """The table's content height follows its rows through the scrollbar alone (a
    layout of the screen at every keystroke costs more the more rollouts there are:
    docs/performance.md); the screen is laid out only when the scrollbar appears or
    goes."""
    store = queued_and_running(100, running_every=4)
    app = TableApp(store)
    async with app.run_test(size=(140, 30)) as pilot:
        table = app.query_one(RolloutsTable)
        table.rebuild()
        await pilot.pause()
        reflow = app.screen._compositor.reflow
        layouts: list[int] = []

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            layouts.append(1)
            return reflow(*args, **kwargs)

        app.screen._compositor.reflow = counted  # type: ignore[method-assign]

        def settled() -> bool:  # a pause went by with no layout: the start's own have run
            quiet = not layouts
            layouts.clear()
            return quiet

        await pilot.pause()
        await until(pilot, settled)
        scrollbar = table.vertical_scrollbar
        table.set_filter(RowFilter.parse("status:running"))
        await pilot.pause()
        assert (table.row_count, scrollbar.window_virtual_size, len(layouts)) == (75, 76, 0)
        table.action_last()
        await pilot.pause()
        assert "task 99" in draw(table)[-1]  # scrolled to the last row
        table.set_filter(RowFilter.parse("status:queued 1"))  # v/12 and v/16: no scrollbar
        await pilot.pause()
        assert table.row_count == 2 and not table.show_vertical_scrollbar and layouts
        table.set_filter(RowFilter())
        await until(pilot, lambda: table.show_vertical_scrollbar and scrollbar.window_virtual_size == 101)


async def test_clearing_the_filter_draws_again_only_what_changed_or_ticked(store: RolloutStore) -> None:
    """The rows a cleared filter brings back keep what they drew, unless their rollout
    changed meanwhile (shown or not) or a tick moved their clocks on since."""
    app = TableApp(store)
    async with app.run_test(size=(140, 30)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        draw(table)
        table.set_filter(RowFilter.parse("variant:cand"))
        draw(table)
        hidden = "baseline/run0/0"
        store.failed(hidden, "boom")
        table.sync(store.take_changes().rollouts)
        drawn: list[str] = []
        row_strip = table._row_strip
        table._row_strip = lambda key, layer: drawn.append(key) or row_strip(key, layer)  # type: ignore[method-assign]
        table.set_filter(RowFilter())
        lines = draw(table)
        assert table.row_count == 14 and set(drawn) == {hidden, table.selected_key}
        assert "error" in lines[1 + table.get_row_index(hidden)]
        drawn.clear()
        table.tick()
        draw(table)
        live = {key for key in table.ordered_keys if not store.rollouts[key].status.finished}
        assert set(drawn) == live | {table.selected_key} and hidden not in drawn
