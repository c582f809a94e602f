"""Many rollouts end to end (5,000 by default, `--rollouts N`): the real app, headless
under `run_test`, attached to a local source streaming the demo's `scale` rollouts at
socket speed, against the same app with 256 rollouts in the same run (the aims are in
docs/performance.md).

The demo server plays a few rollouts once; `bench/live.py`'s source replays them,
round-robin, for every run the app starts (all of them at once: `max_concurrent` is
the rollout count, the worst case for the screen). The baseline's rollouts are
`BASELINE_LONGER` times as long (as many turns arrive per rollout per second, but its
stream lasts as long as the large one's), so both streams outlast the keys. Each size
runs in its own process, started as `tracewatch CONFIG` is (`tracewatch.launch`: its imports,
config, session folder, recording, retention; `$TRACEWATCH_HOME` a scratch folder),
with Textual's `App.run` swapped for `run_test`; its source is started beforehand, and
the bytecode is compiled first, as an installed package has it. Each reports:

- launch to first table row on screen, with the steps on the way (interpreter and
  the entry point's imports, config, engine and app, the app's first screen, the
  first row);
- keypress (Down/Up) to repaint while the stream lands;
- each filter keystroke (typing `status:running` in the filter) to the filtered table
  on screen, and Escape (clearing it) to the whole table on screen, while the stream
  lands;
- the longest GC pause, and until the quit its longest and the most CPU one took (a
  pause on a loaded box is mostly waiting for a core);
- the RSS once every row is on screen and once the keys are done, per rollout and per
  delta landed, so a growth that is not linear in rollouts shows between the sizes.

    python -m bench.many_rollouts [--rollouts 5000 --baseline 256 --load-seconds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LAUNCHED = time.time()  # as early as this process can tell: before the heavy imports

from bench.live import LOST_KEY, ROOT, GcPauses, Source, capture, percentile, rss_bytes, summary, write_config  # noqa: E402

CAPTURED = 32
"""Distinct rollouts the demo plays; the source replays them for every run."""
BASELINE_LONGER = 4
"""The baseline's rollouts have this many times the turns (and the demo plays this
many times fewer distinct ones, so capturing costs the same): at 256 rollouts a
200-turn stream ends within the keys on a quiet box, leaving them idle."""
FILTER_TEXT = "status:running"
FILTER_ROUNDS = 3
KEY_EVERY = 0.1
KEY_NAMES = {":": "colon", " ": "space", "/": "slash"}


async def measure_app(app: Any, steps: dict[str, float], rollouts: int, load_seconds: float, launched: float) -> dict:
    from textual import events

    from tracewatch.core.session.rollout_filter import RowFilter

    steps["config, engine, app"] = time.time() - launched
    pauses = GcPauses()
    engine = app.session
    store = engine.store
    pending: list[tuple[float, Callable[[], bool], list[float]]] = []  # at most one

    display = app._display

    def on_display(screen: Any, renderable: Any) -> None:
        """Hooked before the app runs: its first screens come before `run_test` hands over."""
        display(screen, renderable)
        if renderable is None:
            return
        steps.setdefault("first screen", time.time() - launched)
        table = getattr(app, "table", None)
        if table is not None and table.rows_drawn and "first row" not in steps:
            steps["first row"] = time.time() - launched
        if pending and pending[0][1]():
            pressed, _, into = pending.pop()
            into.append(time.perf_counter() - pressed)

    app._display = on_display
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.table

        async def press(key: str, char: str | None, answered: Callable[[], bool], into: list[float]) -> None:
            """Post one key and wait until a repaint shows its effect (or LOST_KEY)."""
            pending.append((time.perf_counter(), answered, into))
            app.post_message(events.Key(key, char))
            deadline = time.perf_counter() + LOST_KEY
            while pending and time.perf_counter() < deadline:
                await asyncio.sleep(0.002)
            if pending:
                pending.clear()
                into.append(LOST_KEY)

        while "first row" not in steps:
            await asyncio.sleep(0.005)
        while table.row_count < rollouts or not any(r.deltas for r in store.rollouts.values()):
            await asyncio.sleep(0.05)
        steps["every row, streaming"] = time.time() - launched
        rss_rows = rss_bytes()
        table.focus()
        await pilot.pause()

        keys: list[float] = []
        until, down = time.perf_counter() + load_seconds, True
        while time.perf_counter() < until:
            before = table.cursor_row
            await press("down" if down else "up", None, lambda before=before: table.cursor_row != before, keys)
            down = not down
            await asyncio.sleep(KEY_EVERY)

        typing: list[float] = []
        clearing: list[float] = []
        shown: list[int] = []
        for _ in range(FILTER_ROUNDS):
            await press("slash", "/", lambda: app.focused is app.query_one("#filter"), [])
            typed = ""
            for char in FILTER_TEXT:
                typed += char
                wanted = RowFilter.parse(typed)
                await press(KEY_NAMES.get(char, char), char, lambda wanted=wanted: table.row_filter == wanted, typing)
            shown.append(table.row_count)
            await press("escape", None, lambda: not table.row_filter, clearing)
            await asyncio.sleep(KEY_EVERY)
        deltas = sum(r.deltas for r in store.rollouts.values())
        streaming = sum(1 for r in store.rollouts.values() if not r.status.finished)
        rss_keys = rss_bytes()
        gc_streaming = (pauses.longest, pauses.most_cpu, pauses.most_cpu_generation, pauses.total_cpu, pauses.full)
        cpu_streaming = time.process_time()
        quit_started = time.perf_counter()
        await engine.shutdown()
        quit_seconds = time.perf_counter() - quit_started
    return {
        "steps": steps,
        "keys": keys,
        "typing": typing,
        "clearing": clearing,
        "filtered_rows": shown,
        "deltas": deltas,
        "streaming": streaming,
        "quit": quit_seconds,
        "gc_longest": pauses.longest,
        "gc_streaming": gc_streaming,
        "cpu": cpu_streaming,
        "rss_rows": rss_rows,
        "rss_keys": rss_keys,
    }


def measure(config: Path, rollouts: int, load_seconds: float, launched: float) -> dict:
    """`tracewatch CONFIG` as the command runs it (`tracewatch.launch`), but for `App.run`: the
    real app's `run_test` instead, so keys can be sent and each repaint seen. Textual's
    App is imported first to swap that, after the collector's pause the command starts
    with (importing it there, as the command does, costs what it costs there)."""
    from tracewatch.core.session.retention import pause_collection

    pause_collection()
    from textual.app import App

    from tracewatch import cli, launch  # noqa: F401 - the command's imports (but the app's own), timed as such

    steps = {"imports": time.time() - launched}
    measured: dict[str, Any] = {}

    def run_test_instead(app: Any, *_: Any, **__: Any) -> None:
        measured.update(asyncio.run(measure_app(app, steps, rollouts, load_seconds, launched)))

    App.run = run_test_instead  # type: ignore[method-assign]
    code = launch.main([str(config)])
    if code or not measured:
        raise SystemExit(f"tracewatch exited {code} without measuring")
    return measured


def run_size(frames: Path, rollouts: int, turns: int, args: argparse.Namespace) -> dict:
    source = Source(frames)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            config = write_config(source.address, rollouts, turns, args.tokens, Path(scratch))
            env = {**os.environ, "TRACEWATCH_HOME": str(Path(scratch) / "home")}
            argv = [sys.executable, "-m", "bench.many_rollouts", "--measure", str(config), "--rollouts", str(rollouts)]
            argv += ["--load-seconds", str(args.load_seconds), "--launched", repr(time.time())]
            output = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    finally:
        source.close()
    if output.returncode:
        raise SystemExit(f"{rollouts} rollouts failed:\n{output.stderr[-4000:]}")
    return json.loads(output.stdout.strip().splitlines()[-1])


def p95(values: list[float]) -> float:
    return percentile(sorted(values), 0.95) if values else float("nan")


def report(args: argparse.Namespace) -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-q", "core", "tui", "bench/live.py"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    baseline_turns = args.turns * BASELINE_LONGER
    with tempfile.TemporaryDirectory() as scratch:
        frames, baseline_frames = Path(scratch) / "frames.msgpack", Path(scratch) / "baseline.msgpack"
        capture(frames, CAPTURED, args.turns, args.tokens)
        capture(baseline_frames, CAPTURED // BASELINE_LONGER, baseline_turns, args.tokens)
        results = {args.baseline: run_size(baseline_frames, args.baseline, baseline_turns, args)}
        results[args.rollouts] = run_size(frames, args.rollouts, args.turns, args)
    base, large = results[args.baseline], results[args.rollouts]
    print(
        f"scale rollouts x {args.turns} turns ({baseline_turns} at {args.baseline:,}) x {args.tokens} tokens/node, all in flight at once; "
        f"{args.load_seconds:g} s of keys under load; {os.cpu_count()} cores, load average {os.getloadavg()[1]:.1f} (5 min)"
    )
    print(f"\n{'launch to ... (s)':<24}" + "".join(f"{size:>10,}" for size in results) + f"{'ratio':>9}")
    for step in large["steps"]:
        small = base["steps"].get(step, float("nan"))
        print(f"{step:<24}{small:>10.3f}{large['steps'][step]:>10.3f}{large['steps'][step] / small:>8.2f}x")
    small, big = (result["steps"]["first row"] - result["steps"]["imports"] for result in (base, large))
    print(f"{'first row after imports':<24}{small:>10.3f}{big:>10.3f}{big / small:>8.2f}x  (imports: the interpreter's start and the entry point's)")
    for name, label in (("keys", "Down/Up under load"), ("typing", "filter keystroke"), ("clearing", "clear the filter")):
        print(f"\n{label}:")
        for size, result in results.items():
            print(f"  {size:>6,} rollouts: {summary(result[name])}")
        print(f"  p95 {args.rollouts:,} / {args.baseline:,}: {p95(large[name]) / p95(base[name]):.2f}x")
    for size, result in results.items():
        idle = "" if result["streaming"] * 2 > size else ": THE STREAM ENDED BEFORE THE KEYS DID, their figures are partly idle"
        print(
            f"\n{size:,} rollouts: {result['deltas']:,} deltas landed, {result['streaming']:,} rollouts still streaming after the keys{idle}; filter showed {result['filtered_rows']} rows; "
            f"quitting took {result['quit']:.1f} s; longest GC pause {result['gc_longest'] * 1e3:.0f} ms"
        )
        wall, cpu, generation, total, full = result["gc_streaming"]
        print(
            f"  until the quit: longest GC pause {wall * 1e3:.0f} ms wall, the most CPU one took {cpu * 1e3:.0f} ms (generation {generation}); "
            f"every collection {total:.2f} s CPU, {total / result['cpu'] * 100:.1f}% of the process's {result['cpu']:.1f} s, {full} full"
        )
        print(
            f"  RSS with every row on screen {result['rss_rows'] / 1e6:,.0f} MB ({result['rss_rows'] / size / 1e3:.1f} kB a rollout), "
            f"after the keys {result['rss_keys'] / 1e6:,.0f} MB ({result['rss_keys'] / size / 1e3:.1f} kB a rollout, "
            f"{result['rss_keys'] / max(result['deltas'], 1):,.0f} B a delta landed)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=5_000)
    parser.add_argument("--baseline", type=int, default=256)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--load-seconds", type=float, default=15.0)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        launched = LAUNCHED if args.launched is None else args.launched
        print(json.dumps(measure(args.measure, args.rollouts, args.load_seconds, launched)))
    else:
        report(args)


if __name__ == "__main__":
    main()
