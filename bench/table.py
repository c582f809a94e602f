"""How a tick that redraws changed rows scales with the table: 200 of 5,000 rows
against all 100 of a 100-row table, per changed row (keyed `update_cell` should make
the ratio about 1), and against a full rebuild of the 5,000 rows measured in the same
run. Each tick includes drawing the visible lines.

    /work/venv/bin/python bench/table.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

from textual.app import App, ComposeResult
from textual.geometry import Region

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tui_standin import feed  # noqa: E402

from core.session.store import RolloutStore  # noqa: E402
from tui.rollouts_table import RolloutsTable  # noqa: E402

CHANGED = 200
REPEATS = 15


class TableApp(App[None]):
    def __init__(self, store: RolloutStore) -> None:
        super().__init__()
        self.store = store

    def compose(self) -> ComposeResult:
        yield RolloutsTable(self.store, self.store.clock)


def make_store(rows: int) -> RolloutStore:
    store = RolloutStore()
    copies = -(-rows // 14)
    feed(store, "bench", copies=copies, finish=False)
    for key in list(store.rollouts)[rows:]:
        del store.rollouts[key]  # feed() adds whole copies of the 14 fixture runs
    store.variants["bench"] = list(store.rollouts)
    store.take_changes()
    return store


def draw(table: RolloutsTable) -> None:
    table.render_lines(Region(0, 0, table.size.width, table.size.height))


def change(store: RolloutStore, keys: list[str], tokens: int) -> None:
    for key in keys:
        rollout = store.rollouts[key]
        trace = next(iter(rollout.traces))
        store.apply(key, {"trace": trace, "set": {"num_total_tokens": tokens}})


async def measure(rows: int) -> tuple[float, float, int]:
    """Median seconds of one tick, of one full rebuild, and the rows a tick changed."""
    store = make_store(rows)
    app = TableApp(store)
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(RolloutsTable)
        table.rebuild()
        await pilot.pause()
        keys = list(store.rollouts)
        changed_rows = min(CHANGED, rows)
        ticks, rebuilds = [], []
        for repeat in range(REPEATS):
            first = (repeat * 37) % (len(keys) - changed_rows + 1)
            chosen = keys[first : first + changed_rows]
            change(store, chosen, 10_000 + repeat)
            changed = store.take_changes().rollouts
            start = time.perf_counter()
            with app.batch_update():
                table.sync(changed)
            draw(table)
            ticks.append(time.perf_counter() - start)
            start = time.perf_counter()
            with app.batch_update():
                table.rebuild()
            draw(table)
            rebuilds.append(time.perf_counter() - start)
        return statistics.median(ticks), statistics.median(rebuilds), changed_rows


async def main() -> None:
    small_tick, _, small_rows = await measure(100)
    large_tick, large_rebuild, large_rows = await measure(5_000)
    print(f"tick ({small_rows} changed rows + draw), 100-row table:   {small_tick * 1e3:8.2f} ms")
    print(f"tick ({large_rows} changed rows + draw), 5,000-row table: {large_tick * 1e3:8.2f} ms")
    print(f"full rebuild + draw, 5,000-row table:             {large_rebuild * 1e3:8.2f} ms")
    print(f"ratio tick 5,000 / tick 100:      {large_tick / small_tick:6.2f}  (about 1 expected)")
    print(f"ratio rebuild 5,000 / tick 5,000: {large_rebuild / large_tick:6.2f}  (what a rebuild per tick would cost)")


if __name__ == "__main__":
    asyncio.run(main())
