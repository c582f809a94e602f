"""A prime-rl run of a million finished episodes read by `core/recordings/prime_rl`,
against baselines measured in the same run.

A synthetic run is written under a temporary folder (deleted at the end): `--rows`
index rows (prime-rl's `index_row` fields, as orjson writes them) pointing at records
in sealed seekable-zstd chunks of `--chunk-mb` (4 MiB frames, as prime-rl seals them),
and an orchestrator and a trainer annotation for every train trace. Then:

- the whole index read: `EpisodeIndex.read_on` until caught up, rows per CPU second,
  against `orjson.loads` per line (how prime-rl's dashboard reads it) and `json.loads`;
- resident memory per finished episode: a fresh child process reads the index (and
  then the annotations, joined onto the rows) and reports its RSS growth per row;
- time to the first rows: a new reader's first `read_on` (what the first screen waits);
- an episode read from a sealed chunk (`PrimeRlRun.open_episode`: seek, one frame,
  its annotations folded), against decompressing the whole chunk;
- a keystroke's numpy work over the million rows: a filter (kind, env, reward) and the
  first screen of what it keeps in reward order (a partition, then a sort of the
  screen), p50/p95 of `--repeats`; and every row sorted by a column, for reference;
- the live follower with `--traces` files in flight: CPU per poll with nothing
  changing (as a share of one core at a poll every 0.5 s and every 0.1 s), and per
  poll while 10% of the files grow by a delta each; and `PrimeRlRun.poll` as a whole
  (every reader caught up, the live traces in the run) with nothing changing.

    python -m bench.prime_rl [--rows 1000000 --chunk-mb 64 --traces 1024 --repeats 20]

Figures and the load average are printed; docs/performance.md keeps them.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyzstd

from tracewatch.core.recordings.prime_rl.episodes import EpisodeIndex
from tracewatch.core.recordings.prime_rl.layout import find_run
from tracewatch.core.recordings.prime_rl.live import LiveFollower
from tracewatch.core.recordings.prime_rl.run import PrimeRlRun

OPTS = orjson.OPT_APPEND_NEWLINE
ENVS = ("gsm8k", "math", "code", "search")
SCREEN = 100
"""Rows a first screen shows."""
STOPS = ("agent_completed", "max_turns", "max_output_tokens")


def record(episode: str, trace: str, rng: random.Random) -> bytes:
    """A small episode record: one trace, a root and an assistant node with tokens."""
    tokens = [rng.randrange(50_000) for _ in range(24)]
    mask = [False] * 12 + [True] * 12
    node0 = {"semantic_parents": [], "message": {"role": "user", "content": "solve"}, "sampled": False, "timestamp": 1.0, "token_ids": tokens[:12], "mask": mask[:12], "is_content": [], "logprobs": []}
    node1 = {"parent": 0, "semantic_parents": [], "message": {"role": "assistant", "content": "42"}, "sampled": True, "timestamp": 2.0, "token_ids": tokens[12:], "mask": mask[12:], "is_content": [], "logprobs": [-0.1] * 12}
    trace_record = {"id": trace, "nodes": [node0, node1], "calls": [], "rewards": {"correct": {"score": 1.0, "weight": 1.0}}, "info": {"kind": "train", "dispatch": {"step": 3, "time": 1.0}}}
    return orjson.dumps({"id": episode, "env": {"id": "e", "name": "gsm8k"}, "task": {"type": "T", "data": {"idx": 1, "name": "t"}}, "traces": [trace_record]}, option=OPTS)


def index_line(line: int, episode: str, trace: str, chunk: int, offset: int, rng: random.Random) -> bytes:
    return orjson.dumps(
        {
            "cost": None, "line": line, "offset": offset, "id": episode, "kind": "eval" if line % 10 == 0 else "train",
            "trace_ids": [trace], "env": ENVS[line % 4], "group": str(uuid.UUID(int=line // 8)), "ok": rng.random() > 0.05,
            "num_errors": 0, "reward": rng.random(), "advantage": None, "input_tokens": rng.randrange(100, 4000),
            "output_tokens": rng.randrange(10, 2000), "turns": rng.randrange(1, 20), "branches": 1,
            "stop_condition": STOPS[line % 3], "truncated": line % 3 != 0, "dispatch": 1.79e9 + line, "arrival": 1.79e9 + line + 20.5,
            "duration": 20.5, "chunk": chunk,
        },
        option=OPTS,
    )


def write_run(out: Path, rows: int, chunk_bytes: int) -> tuple[float, int]:
    """(seconds, chunks): the synthetic run."""
    start = time.perf_counter()
    traces = out / "monitors" / "file" / "traces"
    stream, notes = traces / "stream", traces / "annotations"
    for folder in (stream, notes / "orchestrator", notes / "trainer"):
        folder.mkdir(parents=True)
    rng = random.Random(7)
    chunk, size, lines = 0, 0, []
    index = open(traces / "stream.index.jsonl", "wb")
    orch_index, trainer_index = open(notes / "orchestrator.index.jsonl", "wb"), open(notes / "trainer.index.jsonl", "wb")
    orch_lines, trainer_lines, orch_size, trainer_size = [], [], 0, 0

    def seal(lines: list[bytes], path: Path) -> None:
        with pyzstd.SeekableZstdFile(path, "wb", level_or_option=3, max_frame_content_size=4 << 20) as sealed:
            sealed.write(b"".join(lines))

    for number in range(1, rows + 1):
        episode, trace = uuid.uuid4().hex, uuid.uuid4().hex
        body = record(episode, trace, rng)
        if size and size + len(body) > chunk_bytes:
            seal(lines, stream / f"{chunk:05d}.jsonl.zst")
            chunk, size, lines = chunk + 1, 0, []
        index.write(index_line(number, episode, trace, chunk, size, rng))
        lines.append(body)
        size += len(body)
        if number % 10:
            info = {"effective": True, "ship": {"step": number // 512, "time": 1.79e9 + number}, "advantage": round(rng.random() - 0.5, 4)}
            update = orjson.dumps({"version": 1, "trace_id": trace, "info": info, "branches": [{"index": 0, "advantages": [0.0] * 12 + [info["advantage"]] * 12}]}, option=OPTS)
            orch_index.write(orjson.dumps({"trace_id": trace, "chunk": 0, "offset": orch_size, "info": info}, option=OPTS))
            orch_lines.append(update)
            orch_size += len(update)
            streams = {"index": 0, "trainer_logprobs": [None] * 12 + [-0.2] * 12, "entropies": [None] * 12 + [0.3] * 12, "is_masked": [None] + [False] * 23}
            update = orjson.dumps({"version": 1, "trace_id": trace, "info": {}, "branches": [streams]}, option=OPTS)
            trainer_index.write(orjson.dumps({"trace_id": trace, "chunk": 0, "offset": trainer_size, "info": {}}, option=OPTS))
            trainer_lines.append(update)
            trainer_size += len(update)
    seal(lines, stream / f"{chunk:05d}.jsonl.zst")
    seal(orch_lines, notes / "orchestrator" / "00000.jsonl.zst")
    seal(trainer_lines, notes / "trainer" / "00000.jsonl.zst")
    for file in (index, orch_index, trainer_index):
        file.close()
    return time.perf_counter() - start, chunk + 1


def cpu(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.process_time()
    result = fn()
    return result, time.process_time() - start


def baseline(path: Path, loads: Callable[[bytes], Any]) -> int:
    """Every line parsed, as prime-rl's dashboard reads its index."""
    rows = 0
    with open(path, "rb") as file:
        rest = b""
        while block := file.read(4 << 20):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            rest = block[cut:]
            rows += len([loads(line) for line in block[:cut].split(b"\n") if line.strip()])
    return rows


def read_all(path: Path) -> EpisodeIndex:
    index = EpisodeIndex(path)
    while True:
        index.read_on()
        if index.caught_up:
            return index


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(out: Path) -> None:
    """Run in a fresh process: RSS growth per row, index alone and with annotations."""
    layout = find_run(out)
    gc.collect()
    before = rss()
    index = read_all(layout.index)
    gc.collect()
    after_index = rss()
    run = PrimeRlRun(layout)
    run.index = index
    annotations = run.annotations
    while True:
        slots = annotations.read_on()
        run._annotate(range(0, 0), slots)
        if annotations.caught_up:
            break
    gc.collect()
    rows = len(index.table)
    print(json.dumps({"rows": rows, "index": (after_index - before) / rows, "with_annotations": (rss() - before) / rows, "columns": index.table.nbytes / rows}))


def live_dir(folder: Path, traces: int) -> None:
    live = folder / "live"
    (live / "pending").mkdir(parents=True)
    for number in range(traces):
        trace = uuid.uuid4().hex
        opening = {"trace": trace, "open": {"version": 1, "id": trace, "verifiers": {"version": "0.4.0", "commit": None}, "task": {"type": "T", "data": {"idx": number}}}, "set": {"timing": {"start": 1.0, "setup": {"start": 1.5, "end": 0.0}}}, "dispatch": {"id": f"d{number}", "kind": "train", "env": "gsm8k", "group": "g", "task": "t", "step": 1, "started": 1.0}}
        (live / f"{trace}.jsonl").write_bytes(orjson.dumps(opening) + b"\n\n" + _node_delta(trace, 0) + b"\n\n")


def _node_delta(trace: str, index: int) -> bytes:
    node = {"parent": index - 1 if index else None, "semantic_parents": [], "message": {"role": "assistant", "content": "x" * 200}, "sampled": True, "timestamp": 2.0, "token_ids": list(range(64)), "mask": [True] * 64, "is_content": [], "logprobs": [-0.1] * 64}
    return orjson.dumps({"trace": trace, "nodes": [node]})


def follower_cost(folder: Path, traces: int, polls: int) -> dict[str, float]:
    live_dir(folder, traces)
    follower = LiveFollower(folder / "live", folder / "live" / "pending")
    while follower.poll().more:
        pass
    _, idle = cpu(lambda: [follower.poll() for _ in range(polls)])
    names = sorted(p.name for p in (folder / "live").glob("*.jsonl"))
    growing = names[: max(1, traces // 10)]
    total = 0.0
    for round_ in range(polls):
        for name in growing:
            with open(folder / "live" / name, "ab") as file:
                file.write(_node_delta(name[:-6], round_ + 1) + b"\n\n")
        _, spent = cpu(follower.poll)
        total += spent
    errors = [t.error for t in follower.traces.values() if t.error]
    assert not errors, errors[:3]
    return {"idle_ms": idle / polls * 1000, "growing_ms": total / polls * 1000, "growing_files": len(growing)}


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-mb", type=int, default=64)
    parser.add_argument("--traces", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--memory-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child)
        return
    folder = Path(tempfile.mkdtemp(prefix="tracewatch-bench-prime-rl-"))
    try:
        print(f"load average {os.getloadavg()}")
        seconds, chunks = write_run(folder / "out", args.rows, args.chunk_mb << 20)
        layout = find_run(folder / "out")
        print(f"wrote {args.rows:,} rows in {chunks} sealed chunks in {seconds:.1f} s ({layout.index.stat().st_size / 1e6:.0f} MB of index)")

        rows_orjson, t_orjson = cpu(lambda: baseline(layout.index, orjson.loads))
        rows_json, t_json = cpu(lambda: baseline(layout.index, json.loads))
        index, t_ours = cpu(lambda: read_all(layout.index))
        assert len(index.table) == rows_orjson == rows_json == args.rows, (len(index.table), rows_orjson)
        print(f"index read: ours {args.rows / t_ours:,.0f} rows/s; orjson per line {rows_orjson / t_orjson:,.0f}; json {rows_json / t_json:,.0f}")
        print(f"  ratio vs orjson {t_orjson / t_ours:.2f}x (aim >= 0.5x), vs json {t_json / t_ours:.2f}x   load {os.getloadavg()[0]:.1f}")

        first = EpisodeIndex(layout.index)
        started = time.perf_counter()
        shown = first.read_on()
        print(f"first rows: {len(shown):,} rows after {(time.perf_counter() - started) * 1000:.0f} ms (aim <= 1 s)")

        child = subprocess.run([sys.executable, "-m", "bench.prime_rl", "--memory-child", str(folder / "out")], capture_output=True, text=True, check=True)
        memory = json.loads(child.stdout)
        print(f"resident memory per finished episode: {memory['index']:.0f} bytes (columns {memory['columns']:.0f}); with the annotations joined {memory['with_annotations']:.0f} (aim <= 300)")

        run = PrimeRlRun(layout)
        run.index = index
        rng = random.Random(3)
        picks = [rng.randrange(args.rows) for _ in range(args.repeats)]
        opened = []
        for row in picks:
            started = time.perf_counter()
            episode = run.open_episode(row)
            opened.append(time.perf_counter() - started)
            assert episode.record["id"] == index.table.episode_id(row)
        p50, p95 = percentiles(opened)
        started = time.perf_counter()
        with pyzstd.SeekableZstdFile(layout.stream / "00000.jsonl.zst", "rb") as whole:
            while whole.read(4 << 20):
                pass
        print(f"episode from a sealed chunk: p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms (aim <= 200 ms); decompressing a whole {args.chunk_mb} MiB chunk {(time.perf_counter() - started) * 1000:.0f} ms")

        table = index.table
        reward, kind, env = table.column("reward"), table.column("kind"), table.column("env")
        train, code = table.code("kind", "train"), table.code("env", "math")
        filters, screens, sorts = [], [], []
        for repeat in range(args.repeats):
            started = time.perf_counter()
            kept = np.flatnonzero((kind == train) & (env == code) & (reward > 0.25 + repeat / 100))
            filters.append(time.perf_counter() - started)
            started = time.perf_counter()
            top = kept[np.argpartition(-reward[kept], SCREEN)[:SCREEN]]
            top[np.argsort(-reward[top])]
            screens.append(time.perf_counter() - started)
            started = time.perf_counter()
            np.argsort(-reward)
            sorts.append(time.perf_counter() - started)
        (f50, f95), (t50, t95), (s50, s95) = percentiles(filters), percentiles(screens), percentiles(sorts)
        keystroke = percentiles([a + b for a, b in zip(filters, screens)])
        print(
            f"over {args.rows:,} rows: filter (kind, env, reward) p50 {f50 * 1000:.1f} / p95 {f95 * 1000:.1f} ms; "
            f"the first screen of what it kept, sorted by reward, p50 {t50 * 1000:.1f} / p95 {t95 * 1000:.1f} ms; "
            f"a keystroke (both) p95 {keystroke[1] * 1000:.1f} ms (aim <= 100); every row sorted by reward p50 {s50 * 1000:.0f} / p95 {s95 * 1000:.0f} ms"
        )

        live_dir(layout.traces, args.traces)
        while run.poll(slice_seconds=0.5).more:
            pass
        _, idle = cpu(lambda: [run.poll() for _ in range(args.repeats)])
        print(f"the whole run's poll (index, annotations, metrics, plan, {args.traces} live traces) with nothing changing: {idle / args.repeats * 1000:.2f} ms CPU")
        live = follower_cost(folder / "live", args.traces, args.repeats)
        print(
            f"live follower, {args.traces} traces: idle poll {live['idle_ms']:.2f} ms CPU = {live['idle_ms'] / 5:.1f}% of a core at 2 polls/s, "
            f"{live['idle_ms'] / 1:.1f}% at 10/s (aim <= 10%); with {live['growing_files']} files growing a delta each: {live['growing_ms']:.1f} ms a poll"
        )
        print(f"load average {os.getloadavg()}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
