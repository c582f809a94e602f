"""The rollouts table on its own: keyed rows, changed cells only, filter, sort, ticks."""

from __future__ import annotations

import time

import pytest
from textual.app import App, ComposeResult
from tui_standin import feed

from core.session.store import RolloutStore
from tui.rollout_filter import RowFilter
from tui.rollouts_table import ROWS_PER_TICK, RolloutsTable


class TableApp(App[None]):
    def __init__(self, store: RolloutStore) -> None:
        super().__init__()
        self.store = store

    def compose(self) -> ComposeResult:
        yield RolloutsTable(self.store, self.store.clock)


def instrument(table: RolloutsTable) -> list[tuple[str, str]]:
    """Record every `update_cell` as (row, column) and forbid rebuilds."""
    calls: list[tuple[str, str]] = []
    update_cell = table.update_cell

    def counting(row_key, column_key, value, **kwargs):
        calls.append((str(row_key), str(column_key)))
        return update_cell(row_key, column_key, value, **kwargs)

    def no_clear(*args, **kwargs):
        raise AssertionError("the table was rebuilt for a delta")

    table.update_cell = counting
    table.clear = no_clear
    return calls


@pytest.fixture
def store() -> RolloutStore:
    store = RolloutStore()
    feed(store, "baseline", finish=False)
    feed(store, "candidate", finish=False)
    store.take_changes()
    return store


def column(table: RolloutsTable, name: str) -> list[str]:
    return [table.get_cell(row.key, name).plain for row in table.ordered_rows]


async def test_a_delta_rewrites_only_the_changed_cells_of_its_row(store: RolloutStore) -> None:
    app = TableApp(store)
    async with app.run_test(size=(140, 30)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        assert table.row_count == 14
        calls = instrument(table)
        key = "candidate/run0/0"
        store.failed(key, "boom")
        table.sync(store.take_changes().rollouts)
        assert calls and {row for row, _ in calls} == {key}
        assert {col for _, col in calls} <= {"phase", "activity", "elapsed"}
        assert table.get_cell(key, "phase").plain == "error"
        calls.clear()
        table.sync([key])  # nothing changed since: nothing written
        assert calls == []


async def test_a_burst_is_spread_over_ticks(store: RolloutStore) -> None:
    app = TableApp(store)
    async with app.run_test(size=(140, 30)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        for i in range(ROWS_PER_TICK + 10):
            store.add_rollout("extra", 0, {"name": f"extra {i}"}, key=f"extra/{i}")
        table.sync(store.take_changes().added)
        assert table.row_count == 14 + ROWS_PER_TICK
        table.sync([])  # the next tick draws the rest
        assert table.row_count == 14 + ROWS_PER_TICK + 10


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
        assert table.columns["tokens"].label.plain.endswith("▼")


async def test_tick_advances_only_running_rows_on_screen(store: RolloutStore) -> None:
    clock = [time.time()]
    store.clock = lambda: clock[0]
    for i in range(200):
        rollout = store.add_rollout("many", 0, {"name": f"t{i}"}, key=f"many/{i}")
        store.started(rollout.key, f"r{i}", t=clock[0])
    app = TableApp(store)
    async with app.run_test(size=(140, 20)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        table.sort_by("variant")
        calls = instrument(table)
        clock[0] += 5
        table.tick()
        rows = {row for row, _ in calls}
        assert 0 < len(rows) <= table.size.height
        assert {col for _, col in calls} <= {"elapsed", "activity"}


def test_row_filter_parses_fields_and_words() -> None:
    parsed = RowFilter.parse("variant:base,cand status:running Foo")
    assert parsed == RowFilter(("base", "cand"), ("running",), (), ("foo",))
    assert not RowFilter.parse("  ")
