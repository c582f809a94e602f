"""Recording at scale: what an append costs the event loop, and what opening a large
recording costs in time and memory.

Writes a synthetic recording of ~100,000 deltas shaped like a multi-turn tool-use
stream (open headers with the agent config, pending previews, node deltas with token
ids, masks and logprobs, some with a routed-experts array, call usage, timing sets),
interleaved across concurrent rollouts, about 1 GB. Then prints, each against a
baseline measured here:

- write: `Recorder` appends (the caller's cost) and open-to-close against bare
  `msgpack.packb` + buffered `file.write` of the same records;
- index: `RecordingIndex.build` time against a plain chunked read of the file and
  against decoding every record, and its peak and retained memory (tracemalloc)
  against the file size;
- load: `index.load(rollout)` against the index build.

Run: `python -m bench.recording [--deltas N]`. Temp files are deleted.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import msgpack
import numpy as np

from tracewatch.core.recordings.index import RecordingIndex
from tracewatch.core.recordings.reader import read_recording
from tracewatch.core.recordings.recorder import Recorder

CONCURRENT = 64
TURNS = 10
"""Deltas per rollout: open + TURNS x (pending, nodes, calls, set) + rewards twice."""


def agent_config(rng: random.Random) -> dict:
    return {
        "config": {
            "harness": {"id": "bash", "env": {}, "tool_timeout": 600.0, "skills": [], "edit": True},
            "model": "Qwen/Qwen3-30B-A3B",
            "client": {"base_url": "http://10.0.0.7:8000/v1", "api_key_var": "OPENAI_API_KEY", "type": "eval"},
            "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 8192},
            "max_turns": 32,
            "timeout": {"setup": 60.0, "rollout": 1800.0, "scoring": 60.0},
        },
        "runtime": {"id": f"/tmp/runtimes/{rng.getrandbits(64):016x}", "type": "subprocess"},
        "name": "agent",
        "trainable": True,
    }


def text(rng: random.Random, words: int) -> str:
    vocabulary = ("the", "file", "test", "passes", "error", "line", "def", "return", "import", "value")
    return " ".join(rng.choice(vocabulary) for _ in range(words))


def node_delta(rng: np.random.Generator, routed: bool) -> dict:
    """A tool result and the assistant turn after it, with their token arrays."""
    tool_tokens = int(rng.integers(200, 600))
    out_tokens = int(rng.integers(300, 900))
    py = random.Random(int(rng.integers(1 << 30)))
    tool = {
        "parent": 3,
        "semantic_parents": [],
        "message": {"role": "tool", "tool_call_id": "call_1", "content": text(py, tool_tokens // 2)},
        "sampled": False,
        "timestamp": time.time(),
        "token_ids": rng.integers(0, 151_000, tool_tokens).tolist(),
        "mask": [False] * tool_tokens,
        "is_content": [True] * tool_tokens,
        "logprobs": [],
    }
    assistant = {
        "parent": 4,
        "semantic_parents": [],
        "message": {
            "role": "assistant",
            "content": text(py, out_tokens // 3),
            "tool_calls": [{"id": "call_2", "type": "function", "name": "bash", "arguments": '{"command": "pytest -x"}'}],
        },
        "sampled": True,
        "timestamp": time.time(),
        "token_ids": rng.integers(0, 151_000, out_tokens).tolist(),
        "mask": [True] * out_tokens,
        "is_content": [True] * out_tokens,
        "logprobs": (-rng.exponential(0.3, out_tokens)).tolist(),
    }
    if routed:  # MoE router replay: uint8 [tokens, 48 layers, top-8]
        experts = rng.integers(0, 128, (out_tokens, 48, 8), dtype=np.uint8)
        assistant["routed_experts"] = {"__nd__": True, "dtype": "uint8", "shape": list(experts.shape), "data": experts.tobytes()}
    return {"nodes": [tool, assistant]}


def make_stream(total_deltas: int, seed: int = 7) -> list[tuple[str, dict]]:
    """(kind, record) in arrival order, rollouts interleaved CONCURRENT at a time.
    Node deltas come from a pool (building 25,000 distinct token arrays would cost
    more than the bench); packing cost does not depend on repetition."""
    py = random.Random(seed)
    rng = np.random.default_rng(seed)
    pool = [node_delta(rng, routed=i % 10 == 0) for i in range(40)]
    per_rollout = 1 + 4 * TURNS + 2
    rollouts = max(1, total_deltas // per_rollout)

    def rollout_records(n: int):
        rid, trace = f"variant{n % 2}/{n}", f"{py.getrandbits(128):032x}"
        yield "rollout", dict(id=rid, variant=f"variant{n % 2}", task_index=n, task_data={"prompt": text(py, 60)}, rollout_index=0)
        yield "request", dict(id=rid, request_id=f"{py.getrandbits(128):032x}")
        yield "delta", dict(id=rid, delta={"trace": trace, "open": {"version": 1, "id": trace}, "set": {"agent": agent_config(py), "rewards": {}}})
        for turn in range(TURNS):
            pending = [{"role": "tool", "tool_call_id": "call_1", "content": text(py, 200)}]
            yield "delta", dict(id=rid, delta={"trace": trace, "pending": pending})
            yield "delta", dict(id=rid, delta={"trace": trace, **pool[py.randrange(len(pool))]})
            usage = {"input_tokens": 900 * turn, "output_tokens": 500, "duration": 2.5}
            yield "delta", dict(id=rid, delta={"trace": trace, "calls": [{"node": 2 * turn + 3, "usage": usage}]})
            yield "delta", dict(id=rid, delta={"trace": trace, "set": {"timing": {"agent": {"start": 1.0, "end": 0.0}}, "num_total_tokens": 1500 * turn}})
        yield "delta", dict(id=rid, delta={"trace": trace, "set": {"rewards": {"correct": None}}})
        yield "delta", dict(id=rid, delta={"trace": trace, "set": {"rewards": {"correct": {"score": float(n % 3 == 0), "weight": 1.0}}}})
        head = {"id": trace, "ok": True, "errors": [], "num_total_tokens": 15000}
        yield "reply", dict(id=rid, reply={"success": True, "error": None, "head": head, "traces": [{"id": trace, "nodes": 2 * TURNS, "calls": TURNS}]})

    stream: list[tuple[str, dict]] = []
    live = [rollout_records(n) for n in range(min(CONCURRENT, rollouts))]
    started = len(live)
    while live:
        source = live[py.randrange(len(live))]
        record = next(source, None)
        if record is not None:
            stream.append(record)
        elif started < rollouts:
            live[live.index(source)] = rollout_records(started)
            started += 1
        else:
            live.remove(source)
    return stream


def write_recorder(path: Path, stream) -> tuple[float, float]:
    """(seconds inside append calls, seconds from open to closed)."""
    start = time.perf_counter()
    appending = 0.0
    rec = Recorder(path, meta={"bench": True})
    calls = {"rollout": rec.rollout, "request": rec.request, "delta": rec.delta, "reply": rec.reply}
    for kind, fields in stream:
        t0 = time.perf_counter()
        calls[kind](**fields)
        appending += time.perf_counter() - t0
    rec.close()
    return appending, time.perf_counter() - start


def write_frames(path: Path, stream) -> float:
    """Seconds inside append calls when each delta comes as the frame the wire carried
    (the live path: `delta_frame` writes the bytes, nothing is packed again)."""
    frames = [(kind, {**fields, "delta": msgpack.packb(fields["delta"], use_bin_type=True)} if kind == "delta" else fields) for kind, fields in stream]
    rec = Recorder(path, meta={"bench": True})
    calls = {"rollout": rec.rollout, "request": rec.request, "reply": rec.reply}
    appending = 0.0
    for kind, fields in frames:
        t0 = time.perf_counter()
        if kind == "delta":
            rec.delta_frame(fields["id"], fields["delta"], fields.get("t"))
        else:
            calls[kind](**fields)
        appending += time.perf_counter() - t0
    rec.close()
    return appending


def write_baseline(path: Path, stream) -> float:
    """The same records (same shape, same clock reads), packed one by one and written
    to a buffered file: the floor for any msgpack recording."""
    start = time.perf_counter()
    with open(path, "wb") as out:
        out.write(msgpack.packb({"format": "baseline"}))
        for kind, fields in stream:
            record = {"k": kind, "t": time.time(), **fields}
            out.write(msgpack.packb(record, use_bin_type=True))
    return time.perf_counter() - start


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=100_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tracewatch-bench-"))
    try:
        stream, build_s = timed(lambda: make_stream(args.deltas))
        deltas = sum(kind == "delta" for kind, _ in stream)
        print(f"stream: {len(stream):,} records, {deltas:,} deltas, built in {build_s:.1f}s")

        recorded = folder / "bench.twrec"
        appending, total = write_recorder(recorded, stream)
        baseline = write_baseline(folder / "baseline.msgpack", stream)
        (folder / "baseline.msgpack").unlink()
        size = recorded.stat().st_size
        mb = size / 1e6
        print(f"file: {mb:,.0f} MB ({size / deltas / 1e3:.1f} kB per delta)")
        print(
            f"write  recorder appends {deltas / appending:,.0f} deltas/s {mb / appending:,.0f} MB/s; "
            f"open-to-closed {mb / total:,.0f} MB/s; baseline packb+write {mb / baseline:,.0f} MB/s"
        )
        print(f"       ratio appends/baseline {appending / baseline:.2f}, open-to-closed/baseline {total / baseline:.2f}")
        as_frames = write_frames(folder / "frames.twrec", stream)
        (folder / "frames.twrec").unlink()
        print(
            f"       appends of the received frames (the live path) {mb / as_frames:,.0f} MB/s: "
            f"{as_frames / appending:.2f}x the time of packing each delta again"
        )

        def plain_read() -> None:
            with open(recorded, "rb") as file:
                while file.read(1 << 20):
                    pass

        _, read_s = timed(plain_read)
        index, index_s = timed(lambda: RecordingIndex.build(recorded))
        assert index.truncated is None and index.records == len(stream), index.truncated
        print(
            f"index  build {index_s:.2f}s ({mb / index_s:,.0f} MB/s) for {len(index.rollouts):,} rollouts; "
            f"plain read {read_s:.2f}s; ratio build/read {index_s / read_s:.1f}"
        )
        del index
        tracemalloc.start()
        index = RecordingIndex.build(recorded)
        retained, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(
            f"       peak memory {peak / 1e6:.1f} MB, retained {retained / 1e6:.1f} MB "
            f"= {peak / size:.2%} / {retained / size:.2%} of the file"
        )

        _, decode_s = timed(lambda: sum(1 for _ in read_recording(recorded)))
        print(f"       decoding every record instead: {decode_s:.2f}s; ratio decode/build {decode_s / index_s:.1f}")

        ids = random.Random(1).sample(sorted(index.rollouts), min(50, len(index.rollouts)))
        loads = []
        for rollout_id in ids:
            records, seconds = timed(lambda rollout_id=rollout_id: index.load(rollout_id))
            assert len(records) == index.rollouts[rollout_id].records
            loads.append(seconds)
        per = statistics.median(loads)
        print(
            f"load   one rollout ({index.rollouts[ids[0]].records} records, "
            f"~{size / len(index.rollouts) / 1e6:.2f} MB) median {per * 1e3:.1f} ms; "
            f"ratio build/load {index_s / per:,.0f}"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
