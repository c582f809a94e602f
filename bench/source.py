"""A verifiers env server at socket speed, for benchmarks whose driver must be the
bottleneck: a ROUTER that answers every run at once with one recorded verifiers 0.4.0
run's deltas (as recorded, or stretched to many turns and tokens) and its reply."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import msgpack
import zmq

from tests.support.repo import FIXTURE


def _pack(payload: Any) -> bytes:
    packed: bytes = msgpack.packb(payload, use_bin_type=True)
    return packed


def recorded_run() -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """verifiers' recorded run0: its deltas by sequence number, and its reply."""
    deltas = [json.loads(line) for line in (FIXTURE / "deltas.jsonl").read_text().splitlines()]
    run0 = {d["seq"]: d["delta"] for d in deltas if d["request"] == "run0"}
    reply = next(r["reply"] for r in json.loads((FIXTURE / "replies.json").read_text()) if r["request"] == "run0")
    return run0, reply


def recorded() -> tuple[list[bytes], bytes]:
    """run0's deltas as recorded, packed, and its reply."""
    run0, reply = recorded_run()
    return [_pack(run0[seq]) for seq in sorted(run0)], _pack(reply)


def stretched(turns: int, tokens: int) -> tuple[list[bytes], bytes]:
    """run0 with its tool turn repeated `turns` times, each sampled node carrying
    `tokens` token ids, mask and logprobs; its deltas packed, and its reply."""
    run0, reply = recorded_run()
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
    return [_pack(frame) for frame in frames], _pack(reply)


def serve(frames: list[bytes], reply: bytes, tell: Any) -> None:
    """Answer every run with `frames` then `reply`, as fast as the socket takes them,
    until killed; `tell(address)` once bound."""
    healthy = _pack({"success": True, "error": None})
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    for option in (zmq.SNDHWM, zmq.RCVHWM, zmq.LINGER):
        router.setsockopt(option, 0)
    router.bind("tcp://127.0.0.1:0")
    tell(router.getsockopt_string(zmq.LAST_ENDPOINT))
    try:
        while True:
            peer, request_id, method, _ = router.recv_multipart()
            if method == b"run":
                for frame in frames:
                    router.send_multipart([peer, request_id, b"delta", frame])
                router.send_multipart([peer, request_id, b"reply", reply])
            else:
                router.send_multipart([peer, request_id, b"reply", healthy])
    finally:
        router.close(linger=0)
        context.term()
