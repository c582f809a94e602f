"""What the wire proxy costs a driver, measured side by side in one run.

Two shapes, each with a driver (verifiers 0.4.0's own EnvClient, in this process)
running the same batch direct and through `tracewatch proxy --headless` (a separate
process whose view is live: every copy is assembled into its store): server-bound (the
demo server streaming the scale scenario, no waits) and driver-bound (a source that
answers every run with the recorded verifiers stream at socket speed, so the driver's
decoding is the limit). Rounds are short and come in pairs, direct then proxy or proxy
then direct in turn, so the box's load moves both sides of a pair alike: each figure
is the median of the pairs' ratios, with their spread. Throughput is the driver's
deltas per wall second; its CPU per delta (getrusage of this process, the driver's
thread and its zmq I/O thread) says whether the proxy cost it work or only time. The
forwarding process's and the view's CPU per 10k deltas and their RSS are read from
/proc. Then the added latency: a stamping server's deltas, each stamped as it is
sent, timed at a driver over both routes in alternated rounds; p99 of each round from
some ten thousand deltas, the added p99 the median of the pairs' differences.

`--against PATH` runs a third route, the proxy from another checkout (main's, say),
in the same pairs: before and after under the very same load.

    python -m bench.proxy [--pairs 7 --runs 128 --turns 8 --blast-runs 512 --stamped 200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zmq
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient
from verifiers.v1.types import SamplingConfig

from bench import source
from tests.support.demo_launch import launch, stop
from tests.support.repo import REPO
from tracewatch.core.ports import free_address
from tracewatch.core.wire.protocol import pack, unpack

SAMPLING = SamplingConfig(temperature=0.3, max_tokens=512)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tasks(runs: int, turns: int, tokens: int) -> list[dict]:
    return [
        {"id": f"s{i}", "prompt": "p", "scenario": "scale", "kind": "coding", "turns": turns, "tokens": tokens}
        for i in range(runs)
    ]


def driver_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def batch(address: str, items: list[dict]) -> tuple[float, int, float]:
    """Seconds for every run to reply, deltas received, and the driver's CPU seconds."""
    client = EnvClient(address)
    deltas = 0

    def count(_: dict) -> None:
        nonlocal deltas
        deltas += 1

    try:
        await client.wait_for_server_startup(timeout=60, interval=0.1)
        start, cpu = time.perf_counter(), driver_cpu()
        await asyncio.gather(*(client.run(EvalClientConfig(), "bench-model", SAMPLING, t, count) for t in items))
        seconds, cpu = time.perf_counter() - start, driver_cpu() - cpu
    finally:
        await client.close()
    return seconds, deltas, cpu


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
    forwarding process it started; from `repo`'s code."""

    def __init__(self, upstream: str, repo: Path = REPO) -> None:
        self.listen = free_address()
        self.out = tempfile.TemporaryFile(mode="w+")  # a pipe nobody reads would block the view's printing
        self.app = subprocess.Popen(
            [sys.executable, "-m", "tracewatch.cli", "proxy", "--listen", self.listen, "--upstream", upstream, "--headless", "--no-record"],
            stdout=self.out, stderr=subprocess.STDOUT, text=True, cwd=repo,
        )
        self.forwarder = 0
        self.cpu = {"forwarder": 0.0, "view": 0.0}
        self.deltas = 0

    async def warm(self, items: list[dict]) -> None:
        if not self.forwarder:
            await batch(self.listen, items[:4])
            tasks = Path(f"/proc/{self.app.pid}/task").iterdir()
            self.forwarder = next(int(child) for task in tasks for child in (task / "children").read_text().split())

    async def run(self, items: list[dict]) -> tuple[float, int, float]:
        await self.warm(items)
        before = cpu_seconds(self.forwarder), cpu_seconds(self.app.pid)
        seconds, deltas, cpu = await batch(self.listen, items)
        self.cpu["forwarder"] += cpu_seconds(self.forwarder) - before[0]
        self.cpu["view"] += cpu_seconds(self.app.pid) - before[1]
        self.deltas += deltas
        return seconds, deltas, cpu

    def per_10k(self, part: str) -> float:
        """CPU milliseconds per 10k deltas."""
        return self.cpu[part] / max(1, self.deltas) * 1e7

    def close(self) -> list[str]:
        self.app.send_signal(signal.SIGINT)
        self.app.wait(60)
        self.out.seek(0)
        lines = [line.rstrip() for line in self.out if line.startswith("proxy:")]
        self.out.close()
        return lines


def cli() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=7, help="alternated pairs of rounds per shape, and of latency rounds")
    parser.add_argument("--runs", type=int, default=128, help="server-bound runs in flight")
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--blast-runs", type=int, default=512, help="driver-bound runs (10 recorded deltas each)")
    parser.add_argument("--stamped", type=int, default=200, help="stamped runs in flight, 50 deltas each, per latency round")
    parser.add_argument("--against", type=Path, help="also the proxy from this checkout (before/after)")
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


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def spread(values: list[float], unit: str = "x", scale: float = 1.0) -> str:
    """The median and the range of `values`."""
    return f"{statistics.median(values) * scale:.3f}{unit} [{min(values) * scale:.3f}-{max(values) * scale:.3f}]"


def orders(routes: list[str], pair: int) -> list[str]:
    """Direct first in one pair, last in the next."""
    return routes if pair % 2 == 0 else routes[::-1]


async def main(args: argparse.Namespace) -> None:
    print(f"start: {load()}", flush=True)
    server, demo = launch(speed=1000.0, stderr=subprocess.DEVNULL)
    blaster, blast = helper("--blast-server")
    stamper, stamped = helper("--stamp-server")
    shapes = {
        "server-bound": (demo, tasks(args.runs, args.turns, args.tokens)),
        "driver-bound": (blast, [{"id": f"b{i}"} for i in range(args.blast_runs)]),
    }
    repos = {"proxy": REPO, **({"before": args.against.resolve()} if args.against else {})}
    proxies = {(shape, route): Proxy(upstream, repo) for shape, (upstream, _) in shapes.items() for route, repo in repos.items()}
    latency_proxies = {route: Proxy(stamped, repo) for route, repo in repos.items()}
    routes = ["direct", *repos]
    rounds: dict[tuple[str, str], list[tuple[float, float]]] = {(shape, route): [] for shape in shapes for route in routes}
    """Per round: deltas per second, driver CPU seconds per delta."""
    p99s: dict[str, list[float]] = {route: [] for route in routes}
    p50s: dict[str, list[float]] = {route: [] for route in routes}
    memory = {}
    try:
        for shape, (upstream, items) in shapes.items():
            await batch(upstream, items[:4])
            for route in repos:
                await proxies[(shape, route)].warm(items)
        for pair in range(args.pairs):
            for shape, (upstream, items) in shapes.items():
                for route in orders(routes, pair):
                    if route == "direct":
                        seconds, deltas, cpu = await batch(upstream, items)
                    else:
                        seconds, deltas, cpu = await proxies[(shape, route)].run(items)
                    rounds[(shape, route)].append((deltas / seconds, cpu / deltas))
                    print(f"{shape:>12} {route:>6}: {deltas:,} deltas in {seconds:.2f}s ({deltas / seconds:,.0f}/s, driver CPU {cpu / deltas * 1e6:.0f} us a delta) {load()}", flush=True)
        address = {"direct": stamped, **{route: proxy.listen for route, proxy in latency_proxies.items()}}
        for route in repos:
            await asyncio.to_thread(latencies, address[route], 4)
        for pair in range(args.pairs):
            for route in orders(routes, pair):
                found = await asyncio.to_thread(latencies, address[route], args.stamped)
                p50s[route].append(pct(found, 0.5))
                p99s[route].append(pct(found, 0.99))
                print(f"latency {route:>6}: {len(found):,} deltas, p50 {pct(found, 0.5) * 1e3:.2f} ms p99 {pct(found, 0.99) * 1e3:.2f} ms {load()}", flush=True)
        memory = {key: (memory_mb(proxy.forwarder), memory_mb(proxy.app.pid)) for key, proxy in proxies.items()}
    finally:
        for process in (stamper, blaster):
            process.send_signal(signal.SIGINT)
            process.wait(30)
        summaries = {key: proxy.close() for key, proxy in proxies.items()}
        for proxy in latency_proxies.values():
            proxy.close()
        stop(server)
    print(f"\nend: {load()}; {args.pairs} alternated pairs a shape; median [range] of the pairs' ratios over direct")
    for shape in shapes:
        direct = rounds[(shape, "direct")]
        print(f"{shape}: direct {statistics.median(r for r, _ in direct):,.0f} deltas/s, driver CPU {statistics.median(c for _, c in direct) * 1e6:.0f} us a delta")
        for route in repos:
            proxy, theirs = proxies[(shape, route)], rounds[(shape, route)]
            rate = [p[0] / d[0] for p, d in zip(theirs, direct, strict=True)]
            cpu = [p[1] / d[1] for p, d in zip(theirs, direct, strict=True)]
            (rss, peak), (view_rss, view_peak) = memory[(shape, route)]
            print(
                f"  {route}: driver throughput {spread(rate)}, driver CPU a delta {spread(cpu)}; per 10k deltas the forwarding process "
                f"{proxy.per_10k('forwarder'):.0f} ms CPU, the view {proxy.per_10k('view'):.0f} ms; RSS forwarding {rss:.0f} MB "
                f"(peak {peak:.0f}), view {view_rss:.0f} MB (peak {view_peak:.0f})"
            )
            print(f"  {route}'s own summary: {' | '.join(summaries[(shape, route)])}")
    print(f"latency, {args.stamped} stamped runs in flight: direct p50 {spread(p50s['direct'], ' ms', 1e3)}, p99 {spread(p99s['direct'], ' ms', 1e3)}")
    for route in repos:
        added50 = [p - d for p, d in zip(p50s[route], p50s["direct"], strict=True)]
        added99 = [p - d for p, d in zip(p99s[route], p99s["direct"], strict=True)]
        print(f"  {route}: p50 {spread(p50s[route], ' ms', 1e3)}, p99 {spread(p99s[route], ' ms', 1e3)}; added p50 {spread(added50, ' ms', 1e3)}, added p99 {spread(added99, ' ms', 1e3)}")


if __name__ == "__main__":
    cli()
