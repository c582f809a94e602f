"""Where the headless engine's CPU goes per delta, stage by stage, against the bare
floor `bench/live.py` compares with (`msgpack.unpackb` of every frame, nothing kept),
in one process on the same stream: the demo's `scale` rollouts as `bench/live.py`
captures them, interleaved one frame per run as its source sends them. No sockets
and no event loop, so what is left between this and `bench/live.py`'s CPU per delta
is receiving, the loop and scheduling runs.

Each stage adds one step to the one before: decoding as the client does
(`unpack_delta`), then the assembly (the boundary check and `apply`), then the rest
of the store's `apply_delta` (what the views show of it), then the recorder writing
the frame (its writer thread's CPU is counted: the clock is the process's). Rounds alternate the stages; the best CPU time
of each is kept.

    python -m bench.ingest [--rollouts 64 --turns 100 --tokens 100 --rounds 5] [--frames PATH]
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgpack

from bench.live import capture
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.wire.protocol import unpack_delta


def interleaved(path: Path) -> list[tuple[int, bytes]]:
    """Every run's delta frames, one per run in turn (as the live source sends them),
    each with the index of its run."""
    runs = [run["deltas"] for run in msgpack.unpackb(path.read_bytes(), raw=False)]
    return [(index, deltas[at]) for at in range(max(map(len, runs))) for index, deltas in enumerate(runs) if at < len(deltas)]


def bare(frames: list[tuple[int, bytes]], _directory: Path) -> None:
    for _, data in frames:
        msgpack.unpackb(data, raw=False, strict_map_key=False)


def decode(frames: list[tuple[int, bytes]], _directory: Path) -> None:
    for _, data in frames:
        unpack_delta(data)


def _store(frames: list[tuple[int, bytes]]) -> tuple[RolloutStore, list[str]]:
    store = RolloutStore()
    keys = [store.add_rollout("scale", index, {}).key for index in range(1 + max(index for index, _ in frames))]
    for key in keys:
        store.started(key, key)
    return store, keys


def assemble(frames: list[tuple[int, bytes]], _directory: Path) -> None:
    store, keys = _store(frames)
    rollouts = [store.rollouts[key] for key in keys]
    for index, data in frames:
        rollouts[index].assembly.apply(unpack_delta(data))


def apply_to_store(frames: list[tuple[int, bytes]], _directory: Path) -> None:
    store, keys = _store(frames)
    for index, data in frames:
        delta = unpack_delta(data)
        key = keys[index]
        store.apply_delta(key, delta)


def record(frames: list[tuple[int, bytes]], directory: Path) -> None:
    store, keys = _store(frames)
    recorder = Recorder(directory / "bench.twrec")
    for index, data in frames:
        key = keys[index]
        recorder.delta_frame(key, data)
        delta = unpack_delta(data)
        store.apply_delta(key, delta)
    recorder.close()
    recorder.path.unlink()


STAGES: dict[str, Callable[[list[tuple[int, bytes]], Path], None]] = {
    "bare unpackb": bare,
    "decode": decode,
    "+ assemble": assemble,
    "+ store": apply_to_store,
    "+ record": record,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frames", type=Path, help="the capture to use, made there first if it is missing (to compare trees on one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        path = args.frames or directory / "frames.msgpack"
        if not path.exists():
            capture(path, args.rollouts, args.turns, args.tokens)
        frames = interleaved(path)
        best = dict.fromkeys(STAGES, float("inf"))
        for _ in range(args.rounds):
            for name, stage in STAGES.items():
                gc.collect()
                start = time.process_time()
                stage(frames, directory)
                best[name] = min(best[name], time.process_time() - start)
    print(
        f"{args.rollouts} scale rollouts x {args.turns} turns x {args.tokens} tokens/node: {len(frames):,} deltas, "
        f"best of {args.rounds} alternated rounds, load {os.getloadavg()[0]:.1f}"
    )
    print(f"  {'stage':<14}{'CPU us/delta':>14}{'this step':>11}{'bare / this':>13}")
    previous = 0.0
    for name, seconds in best.items():
        each = seconds / len(frames) * 1e6
        print(f"  {name:<14}{each:>14.1f}{each - previous:>11.1f}{best['bare unpackb'] / seconds:>12.2f}x")
        previous = each if name != "bare unpackb" else 0.0


if __name__ == "__main__":
    main()
