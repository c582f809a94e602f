"""How the rollouts table scales: a tick that redraws 200 changed rows of 5,000
against all 100 of a 100-row table (the table draws only visible rows, so about 1 is
expected), and, at 5,000 rows, what a filter keystroke (the median, and the slowest of
each `status:running` typed: most keys let the same rollouts through and look at no
row), clearing the filter, a sort and the first draw cost against that tick, in the
same run. Each step includes drawing the visible lines.

    python -m bench.table
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable

from textual.app import App
from textual.geometry import Region

from tests.support.tui_standin import TableApp, feed
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.table.rollouts_table import RolloutsTable

CHANGED = 200
REPEATS = 15


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
        store.apply_delta(key, {"trace": trace, "set": {"num_total_tokens": tokens}})


def timed(app: App, table: RolloutsTable, step: Callable[[], object]) -> float:
    start = time.perf_counter()
    with app.batch_update():
        step()
    draw(table)
    return time.perf_counter() - start


async def measure(rows: int) -> tuple[float, dict[str, float], int]:
    """Median seconds of one tick, of each whole-table step, and the rows a tick changed."""
    store = make_store(rows)
    app = TableApp(store)
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(RolloutsTable)
        steps: dict[str, list[float]] = {"first draw": [timed(app, table, table.rebuild)]}
        await pilot.pause()
        keys = list(store.rollouts)
        changed_rows = min(CHANGED, rows)
        ticks = []
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
            typed, keystrokes = "", []
            for char in "status:running":
                typed += char
                keystrokes.append(timed(app, table, lambda text=typed: table.set_filter(RowFilter.parse(text))))
            steps.setdefault("filter keystroke", []).extend(keystrokes)
            steps.setdefault("slowest keystroke", []).append(max(keystrokes))
            steps.setdefault("clear the filter", []).append(timed(app, table, lambda: table.set_filter(RowFilter())))
            steps.setdefault("sort by tokens", []).append(timed(app, table, lambda: table.sort_by("tokens")))
            steps.setdefault("rebuild", []).append(timed(app, table, table.rebuild))
        return statistics.median(ticks), {name: statistics.median(times) for name, times in steps.items()}, changed_rows


async def main() -> None:
    small_tick, _, small_rows = await measure(100)
    large_tick, steps, large_rows = await measure(5_000)
    print(f"tick ({small_rows} changed rows + draw), 100-row table:   {small_tick * 1e3:8.2f} ms")
    print(f"tick ({large_rows} changed rows + draw), 5,000-row table: {large_tick * 1e3:8.2f} ms")
    print(f"ratio tick 5,000 / tick 100: {large_tick / small_tick:6.2f}  (about 1 expected)")
    for name, seconds in steps.items():
        print(f"5,000 rows, {name + ' + draw:':26} {seconds * 1e3:8.2f} ms = {seconds / large_tick:6.2f}x a tick")


if __name__ == "__main__":
    asyncio.run(main())
