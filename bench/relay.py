"""What `RelayedClient` costs the program that drives the runs: verifiers 0.4.0's own
`EnvClient` against `RelayedClient(EnvClient)`, with no viewer and with two, on small
deltas and on 4,000-token ones, in alternating rounds of one run.

The source is a ROUTER in its own process that answers each run with a recorded
verifiers 0.4.0 rollout stretched to many turns, as fast as the socket takes it, so
the driver (this process) is the bottleneck and every cost of the relay shows. A
viewer is a bare DEALER in its own process that reads every batch. The driver's CPU
is this process's (its threads, the relay's and pyzmq's, included); wall is until
every run returned. Ratios are relayed over plain, per pair of neighbouring rounds,
medians.

    python -m bench.relay [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import multiprocessing
import random
import statistics
import subprocess
import sys
import time
from typing import Any

import msgpack
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient
from verifiers.v1.types import SamplingConfig

from tests.support.repo import FIXTURE
from tracewatch_relay import Relay, RelayedClient

VIEWER = r"""
import sys, msgpack, zmq
context = zmq.Context(); dealer = context.socket(zmq.DEALER); dealer.connect(sys.argv[1])
dealer.send_multipart([b"hello"])
dealer.recv_multipart()  # welcome
print("ready", flush=True)
got = 0
while True:
    frames = dealer.recv_multipart()
    if frames[0] == b"batch":
        got += len(msgpack.unpackb(frames[2]))
"""


def rollout(turns: int, tokens: int) -> tuple[list[bytes], dict[str, Any]]:
    """verifiers' recorded run0, its tool turn repeated `turns` times, each sampled node
    carrying `tokens` token ids, mask and logprobs; its frames and its reply."""
    deltas = [json.loads(line) for line in (FIXTURE / "deltas.jsonl").read_text().splitlines()]
    run0 = {d["seq"]: d["delta"] for d in deltas if d["request"] == "run0"}
    reply = next(r["reply"] for r in json.loads((FIXTURE / "replies.json").read_text()) if r["request"] == "run0")
    rng = random.Random(0)
    frames = [run0[0], run0[1], run0[7], run0[13]]
    for turn in range(turns):
        frames.append(run0[19])
        step = copy.deepcopy(run0[24])
        tool, assistant = step["nodes"]
        tool["parent"], assistant["parent"] = 2 + 2 * turn, 3 + 2 * turn
        if tokens:
            assistant["token_ids"] = [rng.randrange(150_000) for _ in range(tokens)]
            assistant["mask"] = [1] * tokens
            assistant["logprobs"] = [-rng.random() for _ in range(tokens)]
            assistant["is_content"] = [True] * tokens
        step["calls"][0]["node"] = 4 + 2 * turn
        frames.append(step)
    frames += [run0[43], run0[44]]
    reply = copy.deepcopy(reply)
    reply["traces"][0].update(nodes=3 + 2 * turns, calls=1 + turns)
    return [msgpack.packb(frame, use_bin_type=True) for frame in frames], reply


def serve(tell: Any, turns: int, tokens: int) -> None:
    import zmq

    frames, reply = rollout(turns, tokens)
    packed_reply = msgpack.packb(reply, use_bin_type=True)
    healthy = msgpack.packb({"success": True, "error": None}, use_bin_type=True)
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.SNDHWM, 0)
    router.bind("tcp://127.0.0.1:0")
    tell.send(router.getsockopt_string(zmq.LAST_ENDPOINT))
    while True:
        identity, request_id, method, _ = router.recv_multipart()
        if method == b"run":
            for frame in frames:
                router.send_multipart([identity, request_id, b"delta", frame])
            router.send_multipart([identity, request_id, b"reply", packed_reply])
        else:
            router.send_multipart([identity, request_id, b"reply", healthy])


async def drive(address: str, runs: int, relay: Relay | None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of `runs` concurrent rollouts."""
    plain = EnvClient(address)
    client: Any = RelayedClient(plain, relay) if relay is not None else plain
    await client.wait_for_server_startup(timeout=30)
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    tasks = [client.run(EvalClientConfig(), "m", SamplingConfig(), {"id": f"t{i}", "prompt": "p"}) for i in range(runs)]
    await asyncio.gather(*tasks)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await plain.close()
    return cpu, wall


async def relayed(address: str, runs: int, viewers: int) -> tuple[float, float, int]:
    relay = Relay("tcp://127.0.0.1:0")
    procs = [subprocess.Popen([sys.executable, "-c", VIEWER, relay.address], stdout=subprocess.PIPE, text=True) for _ in range(viewers)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        cpu, wall = await drive(address, runs, relay)
        return cpu, wall, relay.dropped + sum(v.dropped for v in relay._viewers.values())
    finally:
        relay.close()
        for proc in procs:
            proc.kill()
            proc.wait()


async def shape(name: str, turns: int, tokens: int, runs: int, rounds: int) -> list[str]:
    spawn = multiprocessing.get_context("spawn")
    receive, send = spawn.Pipe(duplex=False)
    server = spawn.Process(target=serve, args=(send, turns, tokens), daemon=True)
    server.start()
    address = receive.recv()
    try:
        await drive(address, runs, None)  # warm up
        ratios: dict[int, list[tuple[float, float]]] = {0: [], 2: []}
        drops = dict.fromkeys(ratios, 0)
        base_cpu: list[float] = []
        for _ in range(rounds):
            for viewers in ratios:
                cpu, wall = await drive(address, runs, None)
                base_cpu.append(cpu)
                relay_cpu, relay_wall, dropped = await relayed(address, runs, viewers)
                ratios[viewers].append((relay_cpu / cpu, relay_wall / wall))
                drops[viewers] += dropped
        deltas = runs * (6 + 2 * turns)
        lines = [f"{name}: {runs} runs x {turns} turns ({deltas:,} deltas), plain EnvClient {deltas / statistics.median(base_cpu):,.0f} deltas per CPU second"]
        for viewers, pairs in ratios.items():
            lines.append(
                f"  RelayedClient, {viewers} viewers: CPU {statistics.median(p[0] for p in pairs):.3f}x, "
                f"wall {statistics.median(p[1] for p in pairs):.3f}x (rounds: {', '.join(f'{c:.2f}/{w:.2f}' for c, w in pairs)}); dropped {drops[viewers]}"
            )
        return lines
    finally:
        server.kill()
        server.join()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for line in await shape("small deltas", turns=200, tokens=0, runs=32, rounds=args.rounds):
        print(line, flush=True)
    for line in await shape("4,000-token deltas", turns=50, tokens=4000, runs=8, rounds=args.rounds):
        print(line, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
