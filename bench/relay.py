"""What `RelayedClient` costs the program that drives the runs: verifiers 0.4.0's own
`EnvClient` against `RelayedClient(EnvClient)`, with no viewer and with two, on small
deltas and on 4,000-token ones.

The source is a ROUTER in its own process that answers each run with a recorded
verifiers 0.4.0 rollout stretched to many turns, as fast as the socket takes it, so
the driver (this process) is the bottleneck and every cost of the relay shows. A
viewer is a bare DEALER in its own process that reads and unpacks every batch.

The box is shared, so one round says little: many short rounds, plain and relayed
back to back in alternating order, and a ratio per pair. The relay is made afresh for
each relayed round (its thread is part of what it costs, idle or not) at the address
its viewers keep saying hello to. CPU is this process's own rusage (every thread: the
driver's, the relay's, pyzmq's); the driver's thread is its own thread time, the
relay's its thread's clock. Each ratio is the median over the pairs, with the
interquartile range beside it. Where the added CPU goes is printed beside the ratios:
the driver's thread, the relay thread and the process's other threads (pyzmq's I/O
thread sending to the viewers, its garbage-collector thread, the episodes' validation),
and the page faults the driver's thread took more than without the relay, and the
relay thread's own (the relay keeps the bytes of the runs in flight for a viewer that
joins late, so the client allocates fresh pages for the deltas that follow, and every
round hands them back).

    python -m bench.relay [--pairs 6] [--shapes small,heavy]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient
from verifiers.v1.types import SamplingConfig

from bench import source
from bench.source import stretched
from tracewatch.core.ports import free_address
from tracewatch_relay import Relay, RelayedClient

VIEWER = r"""
import sys, msgpack, zmq
context = zmq.Context(); dealer = context.socket(zmq.DEALER); dealer.connect(sys.argv[1])
print("ready", flush=True)
got = 0
while True:
    if not dealer.poll(200):  # no relay here yet, or a new one: say hello again
        dealer.send_multipart([b"hello"])
        continue
    frames = dealer.recv_multipart()
    if frames[0] == b"batch":
        got += len(msgpack.unpackb(frames[2]))
"""


def serve(tell: Any, turns: int, tokens: int) -> None:
    frames, reply = stretched(turns, tokens)
    source.serve(frames, reply, tell.send)


@dataclass
class Round:
    cpu: float
    """The process's CPU seconds (every thread)."""
    driver: float
    """The driver's own thread's CPU seconds."""
    wall: float
    faults: int
    """Minor page faults taken by the driver's thread."""
    relay: float = 0.0
    """The relay thread's CPU seconds."""
    relay_faults: int = 0
    """Minor page faults taken by the relay thread."""
    queue_dropped: int = 0
    viewer_dropped: int = 0


def process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_faults(native_id: int | None = None) -> int:
    """This thread's minor page faults, or another thread's of this process."""
    if native_id is None:
        return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    with open(f"/proc/self/task/{native_id}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[7])


async def drive(address: str, runs: int, relay: Relay | None) -> Round:
    """`runs` concurrent rollouts, timed from the first request to the last reply."""
    plain = EnvClient(address)
    client: Any = RelayedClient(plain, relay) if relay is not None else plain
    await client.wait_for_server_startup(timeout=30)
    gc.collect()
    relay_clock = time.pthread_getcpuclockid(relay._thread.ident) if relay is not None and relay._thread.ident else None
    relay_cpu = time.clock_gettime(relay_clock) if relay_clock is not None else 0.0
    relay_thread = relay._thread.native_id if relay is not None else None
    relay_faults = thread_faults(relay_thread) if relay_thread is not None else 0
    cpu, driver, wall, faults = process_cpu(), time.thread_time(), time.perf_counter(), thread_faults()
    await asyncio.gather(*(client.run(EvalClientConfig(), "m", SamplingConfig(), {"id": f"t{i}", "prompt": "p"}) for i in range(runs)))
    measured = Round(process_cpu() - cpu, time.thread_time() - driver, time.perf_counter() - wall, thread_faults() - faults)
    if relay_clock is not None:
        measured.relay = time.clock_gettime(relay_clock) - relay_cpu
    if relay_thread is not None:
        measured.relay_faults = thread_faults(relay_thread) - relay_faults
    await plain.close()
    return measured


async def relayed(source: str, runs: int, address: str, viewers: int) -> Round:
    """One round through a new relay at `address`, once `viewers` of its viewers are in."""
    relay = Relay(address)
    try:
        deadline = time.monotonic() + 30
        while relay.viewers < viewers:
            assert time.monotonic() < deadline, "the bench's viewers never said hello"
            await asyncio.sleep(0.02)
        measured = await drive(source, runs, relay)
        measured.queue_dropped = relay.dropped
        measured.viewer_dropped = sum(viewer.dropped for viewer in list(relay._viewers.values()))
        return measured
    finally:
        relay.close()


def added(measured: list[tuple[Round, Round]]) -> str:
    """Where the relayed round's added CPU went, medians over the pairs."""

    def median_ms(part: Callable[[Round], float]) -> str:
        return f"{statistics.median(part(r) - part(p) for p, r in measured) * 1000:+.1f} ms"

    faults = statistics.median(r.faults - p.faults for p, r in measured)
    return (
        f"added a round: CPU {median_ms(lambda r: r.cpu)}: driver's thread {median_ms(lambda r: r.driver)}, "
        f"relay thread {median_ms(lambda r: r.relay)}, other threads {median_ms(lambda r: r.cpu - r.driver - r.relay)}; "
        f"page faults: driver's thread {faults:+,.0f}, relay thread {statistics.median(r.relay_faults for _, r in measured):,.0f}"
    )


def spread(values: list[float]) -> str:
    """The median and the interquartile range."""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{median:.3f}x [{q1:.2f}-{q3:.2f}]"


async def shape(name: str, turns: int, tokens: int, runs: int, pairs: int) -> list[str]:
    spawn = multiprocessing.get_context("spawn")
    receive, send = spawn.Pipe(duplex=False)
    server = spawn.Process(target=serve, args=(send, turns, tokens), daemon=True)
    server.start()
    source = receive.recv()
    watched = free_address()
    viewers = [subprocess.Popen([sys.executable, "-c", VIEWER, watched], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for viewer in viewers:
            assert viewer.stdout is not None and viewer.stdout.readline().strip() == "ready"
        await drive(source, runs, None)  # warm up
        rounds: dict[int, list[tuple[Round, Round]]] = {0: [], 2: []}
        for pair in range(pairs):
            for count in rounds:
                address = watched if count else "tcp://127.0.0.1:0"
                if pair % 2:
                    with_relay = await relayed(source, runs, address, count)
                    plain = await drive(source, runs, None)
                else:
                    plain = await drive(source, runs, None)
                    with_relay = await relayed(source, runs, address, count)
                rounds[count].append((plain, with_relay))
        deltas = runs * (6 + 2 * turns)
        plain_cpu = statistics.median(p.cpu for pairs_ in rounds.values() for p, _ in pairs_)
        lines = [f"{name}: {runs} runs x {turns} turns ({deltas:,} deltas) per round, {pairs} pairs; plain EnvClient {deltas / plain_cpu:,.0f} deltas per CPU second"]
        for count, measured in rounds.items():
            lines.append(
                f"  {count} viewers: CPU {spread([r.cpu / p.cpu for p, r in measured])}, wall {spread([r.wall / p.wall for p, r in measured])}, "
                f"driver's thread {spread([r.driver / p.driver for p, r in measured])}; relay thread {statistics.median(r.relay for _, r in measured) / plain_cpu:.1%} of plain's CPU; "
                f"dropped {sum(r.queue_dropped for _, r in measured)} at hand-over, {sum(r.viewer_dropped for _, r in measured)} for viewers"
            )
            lines.append(f"    {added(measured)}")
        return lines
    finally:
        for viewer in viewers:
            viewer.kill()
            viewer.wait()
        server.kill()
        server.join()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=6, help="alternated pairs, at least 2 (each ratio's spread is their quartiles)")
    parser.add_argument("--shapes", default="small,heavy", help="which shapes, comma-separated: small, heavy")
    args = parser.parse_args()
    if args.pairs < 2:
        parser.error("--pairs must be at least 2: each ratio's spread is the pairs' quartiles")
    shapes = set(args.shapes.split(","))
    if "small" in shapes:
        for line in await shape("small deltas", turns=200, tokens=0, runs=16, pairs=args.pairs):
            print(line, flush=True)
    if "heavy" in shapes:
        for line in await shape("4,000-token deltas", turns=25, tokens=4000, runs=8, pairs=args.pairs):
            print(line, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
