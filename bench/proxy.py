"""What the wire proxy costs a driver, measured side by side in one run.

Two shapes, each with a driver (verifiers 0.4.0's own EnvClient) running the same batch
direct and through `tracewatch proxy --headless` (a separate process whose view is
live: every copy is assembled into its store), rounds alternated: server-bound (the
demo server streaming the scale scenario, 256 runs in flight, no waits) and
driver-bound (a source that answers every run with the recorded verifiers stream at
socket speed, so the driver's decoding is the limit). The throughput ratio is the
driver's deltas/s through the proxy over direct (median of the rounds). The forwarding
process's CPU per 10k deltas and its RSS are read from /proc. Meanwhile a prober
measures the added latency: a stamping server's deltas, each stamped as it is sent,
timed at a driver over both routes in turn under the very same load.

    python -m bench.proxy [--runs 256 --turns 12 --tokens 400 --rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import zmq
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient
from verifiers.v1.types import SamplingConfig

from bench import source
from core.ports import free_address
from core.wire.protocol import pack, unpack
from tests.support.demo_launch import launch, stop
from tests.support.repo import REPO

SAMPLING = SamplingConfig(temperature=0.3, max_tokens=512)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tasks(runs: int, turns: int, tokens: int) -> list[dict]:
    return [
        {"id": f"s{i}", "prompt": "p", "scenario": "scale", "kind": "coding", "turns": turns, "tokens": tokens}
        for i in range(runs)
    ]


async def batch(address: str, items: list[dict]) -> tuple[float, int]:
    """Seconds for every run to reply, and deltas received."""
    client = EnvClient(address)
    deltas = 0

    def count(_: dict) -> None:
        nonlocal deltas
        deltas += 1

    try:
        await client.wait_for_server_startup(timeout=60, interval=0.1)
        start = time.perf_counter()
        await asyncio.gather(*(client.run(EvalClientConfig(), "bench-model", SAMPLING, t, count) for t in items))
        seconds = time.perf_counter() - start
    finally:
        await client.close()
    return seconds, deltas


def blast_server() -> None:
    """A source at socket speed: every run is answered at once with the recorded
    verifiers stream of one run and its reply."""
    source.serve(*source.recorded(), lambda address: print(address, flush=True))


def stamp_server(deltas: int, tick: float) -> None:
    """A scripted env server for latency: every run in flight gets one delta per tick,
    stamped with the system-wide monotonic clock as it is sent, then its reply."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    for option in (zmq.SNDHWM, zmq.RCVHWM, zmq.LINGER):
        router.setsockopt(option, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    print(f"tcp://127.0.0.1:{port}", flush=True)
    runs: dict[tuple[bytes, bytes], int] = {}
    pad = "x" * 400
    try:
        while True:
            while router.poll(0):
                peer, request_id, method, _payload = router.recv_multipart()
                if method == b"run":
                    runs[(peer, request_id)] = 0
                else:
                    router.send_multipart([peer, request_id, b"reply", pack({"success": True})])
            for (peer, request_id), sent in list(runs.items()):
                if sent == deltas:
                    router.send_multipart([peer, request_id, b"reply", pack({"success": False, "error": "stamped"})])
                    del runs[(peer, request_id)]
                    continue
                delta = {"trace": "t", "pending": [{"role": "tool", "content": pad}], "set": {"info": {"stamp": time.monotonic_ns()}}}
                if sent == 0:
                    delta["open"] = {"version": 1, "id": "t", "verifiers": "0.4.0", "task": {}}
                router.send_multipart([peer, request_id, b"delta", pack(delta)])
                runs[(peer, request_id)] = sent + 1
            time.sleep(tick)
    finally:
        router.close(linger=0)
        context.term()


def latencies(address: str, runs: int) -> list[float]:
    """Seconds from each delta's stamp to its arrival at a driver."""
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    for option in (zmq.SNDHWM, zmq.RCVHWM, zmq.LINGER):
        dealer.setsockopt(option, 0)
    dealer.connect(address)
    found = []
    try:
        for i in range(runs):
            dealer.send_multipart([f"r{i}".encode(), b"run", pack({"task_data": {"id": f"l{i}"}, "model": "m", "sampling": {}})])
        replies = 0
        while replies < runs:
            _, kind, data = dealer.recv_multipart()
            arrived = time.monotonic_ns()
            if kind == b"reply":
                replies += 1
            else:
                found.append((arrived - unpack(data)["set"]["info"]["stamp"]) / 1e9)
    finally:
        dealer.close()
        context.term()
    return found


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def memory_mb(pid: int) -> tuple[float, float]:
    """The process's resident set now and at its peak, in MB."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


class Proxy:
    """`tracewatch proxy --headless` in front of `upstream`, its view live, and the
    forwarding process it started."""

    def __init__(self, upstream: str) -> None:
        self.listen = free_address()
        self.app = subprocess.Popen(
            [sys.executable, "-m", "tui.cli", "proxy", "--listen", self.listen, "--upstream", upstream, "--headless", "--no-record"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        )
        self.forwarder = 0
        self.cpu = {"forwarder": 0.0, "view": 0.0}
        self.deltas = 0

    async def run(self, items: list[dict]) -> tuple[float, int]:
        if not self.forwarder:
            await batch(self.listen, items[:4])  # up and warm
            tasks = Path(f"/proc/{self.app.pid}/task").iterdir()
            self.forwarder = next(int(child) for task in tasks for child in (task / "children").read_text().split())
        before = cpu_seconds(self.forwarder), cpu_seconds(self.app.pid)
        seconds, deltas = await batch(self.listen, items)
        self.cpu["forwarder"] += cpu_seconds(self.forwarder) - before[0]
        self.cpu["view"] += cpu_seconds(self.app.pid) - before[1]
        self.deltas += deltas
        return seconds, deltas

    def close(self) -> list[str]:
        self.app.send_signal(signal.SIGINT)
        out = self.app.communicate(timeout=60)[0]
        return [line for line in out.splitlines() if line.startswith("proxy:")]


def cli() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=256, help="server-bound runs in flight, and stamped runs")
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--blast-runs", type=int, default=1024, help="driver-bound runs (10 recorded deltas each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stamp-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--blast-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stamp_server or args.blast_server:
        with contextlib.suppress(KeyboardInterrupt):
            stamp_server(deltas=50, tick=0.02) if args.stamp_server else blast_server()
        return
    asyncio.run(main(args))


def helper(flag: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-m", "bench.proxy", flag], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


async def main(args: argparse.Namespace) -> None:
    server, demo = launch(speed=1000.0, stderr=subprocess.DEVNULL)
    blaster, blast = helper("--blast-server")
    stamper, stamped = helper("--stamp-server")
    shapes = {
        "server-bound": (demo, tasks(args.runs, args.turns, args.tokens)),
        "driver-bound": (blast, [{"id": f"b{i}"} for i in range(args.blast_runs)]),
    }
    proxies = {shape: Proxy(upstream) for shape, (upstream, _) in shapes.items()}
    latency_proxy = Proxy(stamped)
    rates: dict[tuple[str, str], list[float]] = {(shape, route): [] for shape in shapes for route in ("direct", "proxy")}
    delays: dict[str, list[float]] = {"direct": [], "proxy": []}
    summaries: dict[str, list[str]] = {}
    try:
        for round_ in range(args.rounds):
            for shape, (upstream, items) in shapes.items():
                routes = ["direct", "proxy"] if round_ % 2 == 0 else ["proxy", "direct"]
                for route in routes:
                    if route == "proxy":
                        seconds, deltas = await proxies[shape].run(items)
                    else:
                        seconds, deltas = await batch(upstream, items)
                    rates[(shape, route)].append(deltas / seconds)
                    print(f"{shape:>12} {route:>6}: {len(items)} runs, {deltas:,} deltas in {seconds:.2f}s ({deltas / seconds:,.0f} deltas/s)", flush=True)
        await asyncio.to_thread(latencies, latency_proxy.listen, 4)
        for _ in range(args.rounds):
            for route, address in (("direct", stamped), ("proxy", latency_proxy.listen)):
                delays[route] += await asyncio.to_thread(latencies, address, args.runs)
        memory = {shape: memory_mb(proxy.forwarder) for shape, proxy in proxies.items()}
    finally:
        for process in (stamper, blaster):
            process.send_signal(signal.SIGINT)
            process.wait(30)
        for shape, proxy in proxies.items():
            summaries[shape] = proxy.close()
        latency_proxy.close()
        stop(server)
    print()
    for shape, proxy in proxies.items():
        direct, proxied = rates[(shape, "direct")], rates[(shape, "proxy")]
        ratio = statistics.median(proxied) / statistics.median(direct)
        rss, peak = memory[shape]
        print(
            f"{shape}: driver throughput through the proxy {ratio:.3f}x direct (median of {args.rounds} rounds each; "
            f"best {max(proxied) / max(direct):.3f}x); per 10k deltas the forwarding process used {proxy.cpu['forwarder'] / proxy.deltas * 1e4 * 1e3:.0f} ms CPU "
            f"and the view {proxy.cpu['view'] / proxy.deltas * 1e4 * 1e3:.0f} ms; forwarding process RSS {rss:.0f} MB (peak {peak:.0f} MB)"
        )
        print(f"  proxy's own summary: {' | '.join(summaries[shape])}")
    d, p = delays["direct"], delays["proxy"]
    print(
        f"delta latency, {args.runs} stamped runs in flight ({len(d):,}/{len(p):,} deltas): direct p50 {pct(d, 0.5) * 1e3:.2f} ms "
        f"p99 {pct(d, 0.99) * 1e3:.2f} ms; via proxy p50 {pct(p, 0.5) * 1e3:.2f} ms p99 {pct(p, 0.99) * 1e3:.2f} ms"
    )
    print(f"added per round trip: p50 {(pct(p, 0.5) - pct(d, 0.5)) * 1e3:.2f} ms, p99 {(pct(p, 0.99) - pct(d, 0.99)) * 1e3:.2f} ms")


if __name__ == "__main__":
    cli()
