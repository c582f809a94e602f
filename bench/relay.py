"""What relaying costs a driver per delta, with 0, 1 and 5 viewers, against the driver
without it, all in one run.

The driver's own work per delta is what verifiers' EnvClient does: decode the frame
and apply it to its `EpisodeAssembly` (the recorded verifiers stream, many copies).
With the relay, each delta is also handed to `Relay.begin(...)`'s `on_delta`; the
time counts until every viewer (a bare DEALER in its own process, counting) has
received every message, so the relay thread's packing and sending, which shares the
driver's interpreter, is in the figure too.

    python -m bench.relay [--copies 100 --rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time

from verifiers.v1.serve.delta import EpisodeAssembly, unpack

from bench.assembly import recorded_frames
from tracewatch_relay import Relay

VIEWER = r"""
import sys, zmq
expected = int(sys.argv[2])
context = zmq.Context(); dealer = context.socket(zmq.DEALER); dealer.connect(sys.argv[1])
dealer.send_multipart([b"hello"])
dealer.recv_multipart()  # welcome
print("ready", flush=True)
for _ in range(expected):
    dealer.recv_multipart()
print("done", flush=True)
"""


def drive(frames: list[bytes], relay: Relay | None) -> float:
    """Seconds for the driver's loop over every frame (and the relay's begin/end)."""
    gc.collect()
    start = time.perf_counter()
    assemblies: dict[str, EpisodeAssembly] = {}
    on_delta = relay.begin({"id": "bench"}, model="m") if relay is not None else None
    for frame in frames:
        delta = unpack(frame)
        assemblies.setdefault(delta["trace"], EpisodeAssembly()).apply(delta)
        if on_delta is not None:
            on_delta(delta)
    if on_delta is not None:
        on_delta.end(error="bench")
    return time.perf_counter() - start


def with_viewers(frames: list[bytes], count: int) -> tuple[float, float, int]:
    """(driver loop seconds, seconds until every viewer had everything, drops)."""
    relay = Relay("tcp://127.0.0.1:0")
    viewers = [
        subprocess.Popen([sys.executable, "-c", VIEWER, relay.address, str(len(frames) + 2)], stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    try:
        for viewer in viewers:
            assert viewer.stdout is not None and viewer.stdout.readline().strip() == "ready"
        start = time.perf_counter()
        loop = drive(frames, relay)
        while relay._queue:
            time.sleep(0.0005)
        for viewer in viewers:
            assert viewer.stdout is not None and viewer.stdout.readline().strip() == "done"
        return loop, time.perf_counter() - start, relay.dropped
    finally:
        relay.close()
        for viewer in viewers:
            viewer.kill()
            viewer.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    frames = recorded_frames(args.copies)
    size = sum(map(len, frames))
    print(f"{len(frames):,} deltas, {size / 1e6:.1f} MB (the recorded verifiers stream x{args.copies})")
    # interleaved rounds, medians: a loaded machine moves every configuration alike
    bases: list[float] = []
    runs: dict[int, list[tuple[float, float, int]]] = {0: [], 1: [], 5: []}
    for _ in range(args.rounds):
        for count in runs:
            bases.append(drive(frames, None))
            runs[count].append(with_viewers(frames, count))
    base = statistics.median(bases)
    print(f"driver without a relay: {base / len(frames) * 1e6:.1f} us/delta (median of {len(bases)})")
    for count, results in runs.items():
        loop = statistics.median(r[0] for r in results)
        total = statistics.median(r[1] for r in results)
        print(
            f"relay, {count} viewer(s): driver loop {loop / len(frames) * 1e6:.1f} us/delta ({loop / base:.2f}x), "
            f"until every viewer had all {total / len(frames) * 1e6:.1f} us/delta ({total / base:.2f}x); "
            f"dropped {sum(r[2] for r in results)}"
        )


if __name__ == "__main__":
    main()
