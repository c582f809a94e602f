"""A recording of about 1 GB opened and replayed, against a bare read of the same file.

The demo's `scale` rollouts are captured once (`bench/live.py`), then written through
the `Recorder` as the live path writes them (`delta_frame`: the bytes the wire
carried), as many rollouts as the size asks, `CONCURRENT` interleaved at a time, each
with its announcement, request and reply. Then, each in this process:

- bare unpack: every record of the file through `msgpack.Unpacker` (the file's own
  options), records per CPU second: the floor for anything that reads it;
- `RecordingIndex.build`, what `tracewatch open` and `tracewatch replay` do before
  their first screen: records per CPU second against the bare unpack, and seconds;
- `tracewatch open`'s session (`OpenedRecording`) and `replay`'s (`ReplaySession`)
  built: the seconds before the app can draw its first screen; then `open`'s index
  read on the loop after it, a slice at a time (records per CPU second, and the
  longest the loop was held, which a key press waits at most);
- `replay --speed 0`: the replay's records applied per CPU second of its loop for
  `--replay-seconds` (the whole file would take minutes), against the bare unpack;
  then the same in the app (under `run_test`), its ticks and drawing included.

    python -m bench.big_recording [--size-mb 1000 --rounds 2 --replay-seconds 20 --replay-only]

Each round runs every measure once, printing the load beside it; the medians of the
ratios to each round's own bare unpack close the output (robust to a loaded box).
`--size-mb` smaller than 1,000 for a quick look (how long a 1 GB round takes:
docs/performance.md).

The file goes in a temporary folder under /tmp and is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack

from bench.live import capture, scale_task
from tracewatch.core.recordings.file_format import open_unpacker
from tracewatch.core.recordings.index import RecordingIndex
from tracewatch.core.recordings.recorder import Recorder

CAPTURED = 32
CONCURRENT = 64


def write(path: Path, frames: Path, megabytes: float) -> tuple[int, int]:
    """The recording, `CONCURRENT` rollouts interleaved a delta at a time, until the
    file is about `megabytes`; (rollouts, records) written."""
    runs = msgpack.unpackb(frames.read_bytes(), raw=False)
    replies = [msgpack.unpackb(run["reply"], raw=False) for run in runs]
    rng = random.Random(7)
    recorder = Recorder(path, meta={"bench": "big_recording"})
    t = 1_000_000.0
    records = started = 0
    live: list[tuple[str, Iterator[bytes], int]] = []

    def start() -> None:
        nonlocal started, records, t
        key, which = f"v{started % 2}/{started}", started % len(runs)
        recorder.rollout(key, f"v{started % 2}", started, scale_task(started, 0, 0), 0, t=t)
        recorder.request(key, f"req-{started}", t=t)
        live.append((key, iter(runs[which]["deltas"]), which))
        started += 1
        records += 2

    for _ in range(CONCURRENT):
        start()
    limit = megabytes * 1e6
    while live:
        index = rng.randrange(len(live))
        key, deltas, which = live[index]
        t += 0.0005
        frame = next(deltas, None)
        records += 1
        if frame is not None:
            recorder.delta_frame(key, frame, t=t)
            continue
        recorder.reply(key, replies[which], t=t)
        live.pop(index)
        if os.path.getsize(path) < limit:
            start()
    recorder.close()
    return started, records


def cpu_timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, CPU seconds, wall seconds)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.process_time() - cpu, time.perf_counter() - wall


def bare_unpack(path: Path) -> int:
    with open(path, "rb") as file:
        return sum(1 for _ in open_unpacker(file))


async def replay_for(session: Any, seconds: float) -> tuple[int, float, float]:
    """(records applied, the loop thread's CPU seconds, wall seconds) of
    `replay --speed 0` for about `seconds`, once its records are counted (that
    thread's cost is reported on its own)."""
    wall, cpu = time.perf_counter(), time.thread_time()
    await session.start()
    while not session.finished and time.perf_counter() - wall < seconds:
        await asyncio.sleep(0.05)
    applied, cpu, wall = session.applied, time.thread_time() - cpu, time.perf_counter() - wall
    await session.shutdown()
    return applied, cpu, wall


async def read_on(session: Any) -> tuple[float, float, float]:
    """`open`'s index read on after its first screen, on the loop: (CPU seconds, wall
    seconds, the longest the loop went without running another task: what a key
    waits at most, beside the tick)."""
    longest = 0.0

    async def beside() -> None:
        nonlocal longest
        last = time.thread_time()
        while True:
            await asyncio.sleep(0)
            now = time.thread_time()
            longest, last = max(longest, now - last), now

    wall, cpu = time.perf_counter(), time.process_time()
    watcher = asyncio.get_running_loop().create_task(beside())
    await session.start()
    await session.wait()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    watcher.cancel()
    return cpu, wall, longest


def until_counted(session: Any) -> float:
    """Seconds until the replay's thread has counted the records."""
    start = time.perf_counter()
    while session.total is None:
        time.sleep(0.05)
    return time.perf_counter() - start


def one_round(path: Path, rollouts: int, records: int, args: argparse.Namespace) -> dict[str, float]:
    """Each measure once, printed with the load as it ran; the ratios to this round's
    bare unpack."""
    from tracewatch.core.engine.opened import OpenedRecording
    from tracewatch.core.engine.replay import ReplaySession

    ratios = {}
    counted, bare_cpu, bare_wall = cpu_timed(lambda: bare_unpack(path))
    assert counted == records + 1, (counted, records)  # and the header
    bare = records / bare_cpu
    print(f"  bare unpack               {bare:>10,.0f} records/CPU s  ({bare_cpu:.1f} s CPU, {bare_wall:.1f} s wall)  load {load()}")
    if not args.replay_only:
        index, cpu, wall = cpu_timed(lambda: RecordingIndex.build(path))
        assert index.records == records, (index.records, records)
        ratios["index build"] = records / cpu / bare
        print(f"  index build               {records / cpu:>10,.0f} records/CPU s  {ratios['index build']:.2f}x bare  ({cpu:.1f} s CPU, {wall:.1f} s wall)  load {load()}")
        del index
        opened, cpu, wall = cpu_timed(lambda: OpenedRecording(path, at_once=False))
        ratios["open: first screen s"] = wall
        print(f"  open: session built       {wall:>10.2f} s wall ({cpu:.2f} s CPU) before the first screen can be drawn")
        (cpu, wall, longest), _, _ = cpu_timed(lambda: asyncio.run(read_on(opened)))
        assert opened.index.records == records and len(opened.store.rollouts) == rollouts
        ratios["open: rows read on"] = records / cpu / bare
        print(
            f"  open: rows read on        {records / cpu:>10,.0f} records/CPU s  {ratios['open: rows read on']:.2f}x bare  "
            f"({cpu:.1f} s CPU, {wall:.1f} s wall; the loop held at most {longest * 1000:.0f} ms CPU at a time)  load {load()}"
        )
        del opened
    session, cpu, wall = cpu_timed(lambda: ReplaySession(path, speed=0))
    ratios["replay: first screen s"] = wall
    print(f"  replay: session built     {wall:>10.2f} s wall ({cpu:.2f} s CPU) before the first screen can be drawn")
    print(f"          records counted   {until_counted(session):>10.2f} s wall later (a thread, while the replay plays)")
    applied, cpu, wall = asyncio.run(replay_for(session, args.replay_seconds))
    ratios["replay --speed 0"] = applied / cpu / bare
    print(
        f"  replay --speed 0          {applied / cpu:>10,.0f} records/CPU s  {ratios['replay --speed 0']:.2f}x bare  "
        f"({applied:,} records in {wall:.1f} s wall, {cpu:.1f} s CPU)  load {load()}"
    )
    applied, cpu, wall = asyncio.run(replay_in_app(path, args.replay_seconds))
    ratios["replay --speed 0, app"] = applied / cpu / bare
    print(
        f"  replay --speed 0, app     {applied / cpu:>10,.0f} records/CPU s  {ratios['replay --speed 0, app']:.2f}x bare  "
        f"({applied:,} records in {wall:.1f} s wall, {cpu:.1f} s CPU; the app under run_test, 160x48, drawing)  load {load()}"
    )
    return ratios


async def replay_in_app(path: Path, seconds: float) -> tuple[int, float, float]:
    """`replay --speed 0` in the app for about `seconds`: (records applied, the app's
    thread's CPU seconds, wall seconds), its ticks and drawing included."""
    from tracewatch.core.engine.replay import ReplaySession
    from tracewatch.tui.app import TracewatchApp

    session = ReplaySession(path, speed=0)
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        wall, cpu, first = time.perf_counter(), time.thread_time(), session.applied
        while not session.finished and time.perf_counter() - wall < seconds:
            await pilot.pause(0.05)
        return session.applied - first, time.thread_time() - cpu, time.perf_counter() - wall


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", "--size-mb", type=float, default=1000.0)
    parser.add_argument("--replay-seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2, help="each measure this many times, alternated; medians at the end")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--replay-only", action="store_true", help="leave out the index and open")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="tracewatch-big-", dir="/tmp"))
    try:
        frames, path = folder / "frames.msgpack", folder / "big.twrec"
        capture(frames, CAPTURED, args.turns, args.tokens)
        (rollouts, records), _, wall = cpu_timed(lambda: write(path, frames, args.megabytes))
        size = path.stat().st_size
        print(f"recording: {size / 1e6:,.0f} MB, {rollouts:,} rollouts, {records:,} records, written in {wall:.1f} s; {os.cpu_count()} cores, load {load()}")
        rounds = []
        for number in range(args.rounds):
            print(f"round {number + 1}")
            rounds.append(one_round(path, rollouts, records, args))
        print(f"median of {args.rounds} rounds (CPU-time ratios to the same round's bare unpack):")
        for name in rounds[0]:
            value = statistics.median(r[name] for r in rounds)
            print(f"  {name:24} {value:.2f}{'' if name.endswith(' s') else 'x bare'}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
