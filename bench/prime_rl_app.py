"""The real app (`App.run_test`) following a prime-rl run of `--rows` finished episodes
(`bench.prime_rl.write_run`: the index, sealed chunks, annotations), against the data
layer's own read of the same index (`EpisodeIndex`, the columns) in the same process:

- the first screen: from opening the run (`FollowedRun`, its finished episodes kept
  as columns as `tracewatch open` keeps them) to the table's first rows drawn, and to
  every row in the table;
- a filter keystroke over every row (`reward:<0.5`, `variant:eval`, `turns:>10`,
  cleared, in turn): from the key to its rows drawn, p50/p95 of `--repeats`;
- a bare word typed a key at a time (an id's first digits, `3fa8`), the same way;
- a sort keystroke (by reward, turns, task, reversed, in turn), the same way;
- an episode opened: the cursor put on a row deep in the table, then from Enter to
  its transcript drawn (its record read from its sealed chunk), p50/p95;
- resident memory per finished episode once every row is in. The run is written by
  one process and measured by a fresh one, app first: what the writing or the
  baseline's read freed would otherwise be taken again unseen.

    python -m bench.prime_rl_app [--rows 100000 --repeats 10]

Figures and the load average are printed; docs/performance.md keeps them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from textual.geometry import Region

from bench.prime_rl import write_run
from tracewatch.core.engine.followed_run import FollowedRun
from tracewatch.core.recordings.prime_rl.episodes import EpisodeIndex
from tracewatch.core.recordings.prime_rl.layout import StreamRun, find_run
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.tui.app import TracewatchApp

FILTERS = ("reward:<0.5", "variant:eval", "turns:>10", "")
TYPED = ("3", "3f", "3fa", "3fa8")
"""An episode id's first digits typed into the filter, a key at a time."""
SORTS = (("reward", False), ("turns", True), ("task", False), ("reward", True))


def rss() -> int:
    """Resident bytes now (not the peak: writing the run raised that)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def index_seconds(layout: StreamRun) -> float:
    start = time.perf_counter()
    index = EpisodeIndex(layout.index)
    while not index.caught_up:
        index.read_on()
    return time.perf_counter() - start


async def app_figures(layout: StreamRun, rows: int, repeats: int) -> dict[str, float]:
    before = rss()
    start = time.perf_counter()
    session = FollowedRun(layout, follow=False, columns=True)
    app = TracewatchApp(session)
    found: dict[str, float] = {}
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.table
        while table.row_count == 0:
            await pilot.pause(0.005)
        found["first rows"] = time.perf_counter() - start
        while table.row_count < rows:
            await pilot.pause(0.05)
        found["every row"] = time.perf_counter() - start
        found["bytes a row"] = (rss() - before) / rows
        assert session.rows is not None and table.finished_index is not None
        held = {**session.rows.held(), "the table's index": table.finished_index.nbytes, "the run's own columns": session.run.table.nbytes}
        print("held a row: " + ", ".join(f"{name} {size / rows:.1f}" for name, size in held.items()))
        samples = []
        for _ in range(repeats):
            for text in FILTERS:
                shown = asyncio.Event()
                began = time.perf_counter()
                table.set_filter(RowFilter.parse(text), done=shown.set)
                while not shown.is_set():  # a pass over many rows runs a chunk a frame
                    await pilot.pause(0)
                table.render_lines(Region(0, 0, table.size.width, table.size.height))
                samples.append(time.perf_counter() - began)
        percentiles(found, "filter keystroke", samples)
        samples = []
        for _ in range(repeats):
            for text in ("", *TYPED, ""):
                shown = asyncio.Event()
                began = time.perf_counter()
                table.set_filter(RowFilter.parse(text), done=shown.set)
                while not shown.is_set():
                    await pilot.pause(0)
                table.render_lines(Region(0, 0, table.size.width, table.size.height))
                if text:  # the clearing is not timed: the sorts below start from every row
                    samples.append(time.perf_counter() - began)
        percentiles(found, "word typed, a key", samples)
        samples = []
        for _ in range(repeats):
            for column, reverse in SORTS:
                began = time.perf_counter()
                table.sort_by(column, reverse)
                table.render_lines(Region(0, 0, table.size.width, table.size.height))
                samples.append(time.perf_counter() - began)
                await pilot.pause(0)
        percentiles(found, "sort keystroke", samples)
        print(f"held a row after the sorts: the table's index {table.finished_index.nbytes / rows:.1f}")
        samples = []
        table.focus()
        transcript = app.trace_pane.transcript
        for n in range(repeats):
            position = (n + 1) * table.row_count // (repeats + 2)
            table.action_first()
            table.action_cursor(position)
            key = table.selected_key
            assert key is not None
            await pilot.pause(0)  # the cursor's moves reach the app (its settle starts)
            began = time.perf_counter()
            table.action_select_cursor()
            while not ((rollout := session.store.rollouts.get(key)) is not None and rollout.traces and transcript.trace_state is next(iter(rollout.traces.values()))):
                await pilot.pause(0.002)
            transcript.render_lines(Region(0, 0, transcript.size.width, transcript.size.height))
            samples.append(time.perf_counter() - began)
        percentiles(found, "episode opened", samples)
    await session.shutdown()
    return found


def percentiles(found: dict[str, float], name: str, samples: list[float]) -> None:
    samples.sort()
    found[f"{name} p50"] = statistics.median(samples)
    found[f"{name} p95"] = samples[max(0, int(len(samples) * 0.95) - 1)]


def measure(out: Path, rows: int, repeats: int) -> None:
    layout = find_run(out)
    assert isinstance(layout, StreamRun)
    figures = asyncio.run(app_figures(layout, rows, repeats))
    baseline = index_seconds(layout)
    print(f"baseline: the index read into columns: {baseline:.2f} s ({rows / baseline:,.0f} rows/s)")
    for name, value in figures.items():
        shown = f"{value:,.0f}" if name == "bytes a row" else f"{value * 1000:,.1f} ms"
        ratio = "" if name == "bytes a row" else f" ({value / baseline:.2f}x the index read)"
        print(f"app: {name}: {shown}{ratio}")
    print(f"load average: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        measure(args.run, args.rows, args.repeats)
        return
    folder = Path(tempfile.mkdtemp(prefix="tw-prime-app-"))
    try:
        written, chunks = write_run(folder / "out", args.rows, 64 << 20)
        print(f"wrote {args.rows:,} episodes in {chunks} sealed chunks ({written:.1f} s)", flush=True)
        command = [sys.executable, "-m", "bench.prime_rl_app", "--run", str(folder / "out"), "--rows", str(args.rows), "--repeats", str(args.repeats)]
        subprocess.run(command, check=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
