"""A filter keystroke over 20,000 rollouts (`--rollouts N`) in the real app under
`run_test`: from the key to the frame that shows it in the field (the echo), and to the
frame that shows the filtered table, for each key of `status:running` and of a trace
id's prefix, then Escape. The same app, in the same run, alternates rounds of the way
before (the whole pass at the key, trace ids joined and lowered per row at each key)
with the way now (a pass a chunk a frame, ids kept with a rollout's facts); the ratios
are now over before.

    python -m bench.filter_keys [--rollouts 20000 --rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

from bench.live import percentile
from tests.support.tui_standin import make_engine
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.core.session.trace_state import RolloutFacts
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.table.rollouts_table import PASS_CHUNK

KEY_NAMES = {":": "colon", " ": "space", "/": "slash"}
FIXTURE_RUNS = 14
"""Rollouts one copy of the fixture adds to each of its two variants."""
LOST_KEY = 10.0

kept_ids = RolloutFacts.__dict__["ids_text"]
joined_ids = property(lambda facts: " ".join(facts.trace_ids).lower())


def way(app: TracewatchApp, before: bool) -> None:
    """The way before: one pass at the key, ids joined per row; else the way now."""
    app.table.pass_chunk = 10**12 if before else PASS_CHUNK
    setattr(RolloutFacts, "ids_text", joined_ids if before else kept_ids)  # noqa: B010 (a cached property swapped for a plain one: mypy refuses the assignment)
    for rollout in app.store.rollouts.values():
        rollout.summary().__dict__.pop("ids_text", None)


async def measure(rollouts: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    from textual import events

    engine = make_engine(copies=-(-rollouts // (2 * FIXTURE_RUNS)))
    app = TracewatchApp(engine)
    results = {name: {"echo": [], "table": []} for name in ("before", "now")}
    waiting: list[tuple[float, list[tuple[Callable[[], bool], list[float]]]]] = []
    display = app._display

    def on_display(screen: Any, renderable: Any) -> None:
        display(screen, renderable)
        if renderable is None or not waiting:
            return
        pressed, checks = waiting[0]
        for check in [check for check in checks if check[0]()]:
            check[1].append(time.perf_counter() - pressed)
            checks.remove(check)
        if not checks:
            waiting.clear()

    app._display = on_display  # type: ignore[method-assign]
    async with app.run_test(size=(160, 50)) as pilot:
        while app.table.row_count < len(engine.store.rollouts):
            await asyncio.sleep(0.05)
        field = app.query_one("#filter")
        table = app.table

        async def press(key: str, char: str | None, checks: list[tuple[Callable[[], bool], list[float]]]) -> None:
            waiting.append((time.perf_counter(), checks))
            app.post_message(events.Key(key, char))
            deadline = time.perf_counter() + LOST_KEY
            while waiting and time.perf_counter() < deadline:
                await asyncio.sleep(0.002)
            for _, into in waiting[0][1] if waiting else []:
                into.append(LOST_KEY)
            waiting.clear()

        await pilot.pause()
        for round_ in range(rounds * 2):
            name = ("before", "now")[round_ % 2]
            way(app, before=name == "before")
            for text in ("status:running", "afce"):
                table.focus()
                await pilot.pause()
                await press("slash", "/", [(lambda: app.focused is field, [])])
                typed = ""
                for char in text:
                    typed += char
                    wanted = RowFilter.parse(typed)
                    await press(
                        KEY_NAMES.get(char, char),
                        char,
                        [
                            (lambda typed=typed: getattr(field, "value", None) == typed, results[name]["echo"]),
                            (lambda wanted=wanted: table.row_filter == wanted and not table.filtering, results[name]["table"]),
                        ],
                    )
                await press("escape", None, [(lambda: not table.row_filter and not table.filtering, [])])
        way(app, before=False)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    load = os.getloadavg()
    results = asyncio.run(measure(args.rollouts, args.rounds))
    print(f"{args.rollouts:,} rollouts, {args.rounds} rounds of each way, alternated; load {load[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    for what, label in (("echo", "key to the field's echo"), ("table", "key to the filtered table")):
        before, now = results["before"][what], results["now"][what]
        p50 = (percentile(sorted(before), 0.5), percentile(sorted(now), 0.5))
        p95 = (percentile(sorted(before), 0.95), percentile(sorted(now), 0.95))
        print(
            f"{label}: before p50 {p50[0] * 1000:.0f} ms, p95 {p95[0] * 1000:.0f} ms; now p50 {p50[1] * 1000:.0f} ms, "
            f"p95 {p95[1] * 1000:.0f} ms; now/before p50 {p50[1] / p50[0]:.2f}x, p95 {p95[1] / p95[0]:.2f}x ({len(now)} keys each)"
        )


if __name__ == "__main__":
    main()
