"""What the wire proxy costs a driver, measured side by side in one run.

One demo server streams the scale scenario (256 runs in flight, no waits). A driver
(our EnvClient) runs the same batch direct and through `tracewatch proxy --headless`
(a separate process whose view is live: every copy is assembled into its store),
alternating, and the best time of each side gives the throughput ratio. Meanwhile a
prober asks the server for health over both routes in turn, under the very same
load, so the added latency is the proxy route's round trip minus the direct one's
(two frames each: the request and the reply).

    python -m bench.proxy [--runs 256 --turns 12 --tokens 400 --rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import time

import zmq

from core.ports import free_address
from core.wire.client import EnvClient
from core.wire.protocol import pack, unpack
from tests.support.demo_launch import launch, stop
from tests.support.repo import REPO


def tasks(runs: int, turns: int, tokens: int) -> list[dict]:
    return [
        {"id": f"s{i}", "prompt": "p", "scenario": "scale", "kind": "coding", "turns": turns, "tokens": tokens}
        for i in range(runs)
    ]


async def batch(address: str, items: list[dict]) -> tuple[float, int, int]:
    """Seconds for every run to reply, deltas and bytes received."""
    client = EnvClient(address)
    deltas = 0

    def count(_: dict) -> None:
        nonlocal deltas
        deltas += 1

    try:
        await client.wait_for_server_startup(timeout=60)
        start = time.perf_counter()
        records = await asyncio.gather(*(client.run(t, {}, "bench-model", {}, count) for t in items))
        seconds = time.perf_counter() - start
    finally:
        await client.close()
    nodes = sum(len(trace["nodes"]) for record in records for trace in record["traces"])
    return seconds, deltas, nodes


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


def cli() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=256)
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stamp-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stamp_server:
        with contextlib.suppress(KeyboardInterrupt):
            stamp_server(deltas=50, tick=0.02)
        return
    asyncio.run(main(args))


async def main(args: argparse.Namespace) -> None:
    server, upstream = launch(speed=1000.0, stderr=subprocess.DEVNULL)
    listen = free_address()
    proxy = subprocess.Popen(
        [sys.executable, "-m", "tui.cli", "proxy", "--listen", listen, "--upstream", upstream, "--headless", "--no-record"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    items = tasks(args.runs, args.turns, args.tokens)
    times: dict[str, list[float]] = {"direct": [], "proxy": []}
    delays: dict[str, list[float]] = {"direct": [], "proxy": []}
    stamper = subprocess.Popen([sys.executable, "-m", "bench.proxy", "--stamp-server"], stdout=subprocess.PIPE, text=True, cwd=REPO)
    stamped = stamper.stdout.readline().strip()
    listen_stamped = free_address()
    proxy_stamped = subprocess.Popen(
        [sys.executable, "-m", "tui.cli", "proxy", "--listen", listen_stamped, "--upstream", stamped, "--headless", "--no-record"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        await batch(listen, items[:4])  # the proxy is up and both routes are warm
        for _ in range(args.rounds):
            for route, address in (("direct", upstream), ("proxy", listen)):
                seconds, deltas, nodes = await batch(address, items)
                times[route].append(seconds)
                print(f"{route:>6}: {args.runs} runs, {deltas:,} deltas, {nodes:,} nodes in {seconds:.2f}s ({deltas / seconds:,.0f} deltas/s)")
        await asyncio.to_thread(latencies, listen_stamped, 4)
        for _ in range(args.rounds):
            for route, address in (("direct", stamped), ("proxy", listen_stamped)):
                delays[route] += await asyncio.to_thread(latencies, address, args.runs)
    finally:
        for process in (proxy_stamped, stamper):
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        proxy.send_signal(signal.SIGINT)
        summary = proxy.communicate(timeout=60)[0].strip().splitlines()
        stop(server)
    direct, proxied = min(times["direct"]), min(times["proxy"])
    print(f"\nthroughput through the proxy: {direct / proxied:.2f}x direct (best of {args.rounds} each)")
    d, p = delays["direct"], delays["proxy"]
    print(
        f"delta latency, {args.runs} stamped runs in flight ({len(d):,}/{len(p):,} deltas): direct p50 {pct(d, 0.5) * 1e3:.2f} ms "
        f"p99 {pct(d, 0.99) * 1e3:.2f} ms; via proxy p50 {pct(p, 0.5) * 1e3:.2f} ms p99 {pct(p, 0.99) * 1e3:.2f} ms"
    )
    print(f"added per frame: p50 {(pct(p, 0.5) - pct(d, 0.5)) * 1e3:.2f} ms, p99 {(pct(p, 0.99) - pct(d, 0.99)) * 1e3:.2f} ms")
    print("proxy's own summary:", *(line for line in summary if line.startswith("proxy:")))


if __name__ == "__main__":
    cli()
