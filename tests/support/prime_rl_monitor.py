"""prime-rl's file monitor, for tests: writes a run's `monitors/file/` exactly as
prime-rl's `FileMonitor` does (src/prime_rl/monitors/file/, commit 048a6e2 and the
`traces/` package beside it; docs/prime-rl.md has the format), so the readers are
tested against the bytes prime-rl writes, quirks included:

- live files: every delta line followed by a blank line, the `open` line carrying the
  dispatch identity as its last key, one append per file per batch; `done` and
  `discard` delete the file; `pending` placeholders written by a `.tmp` and a rename;
  the first batch of a process removes the whole `live/` (a relaunch's stale traces);
- the episode stream in chunks of `chunk_bytes`, each sealed when full (and at
  `finalize`) as pyzstd seekable zstd in a background thread: `.zst.tmp`, a rename onto
  `.zst`, then the plain file deleted; a relaunch appends to a plain last chunk or starts
  a new one after a sealed one; index rows numbered on across relaunches, the stream
  flushed before the index;
- annotations per producer, the same way, with their index rows;
- `metrics.jsonl` rows written by `json.dumps`, appended; `plan.json` merged and
  replaced atomically.

`frame_bytes` is prime-rl's 4 MiB unless a test wants frames small enough to cross.
"""

from __future__ import annotations

import json
import math
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pyzstd

OPTS = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
FRAME_BYTES = 4 << 20
TRUNCATING_STOPS = frozenset({"max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed"})


def monitor_dir(out: Path) -> Path:
    return out / "monitors" / "file"


def traces_dir(out: Path) -> Path:
    return monitor_dir(out) / "traces"


def seal(path: Path, frame_bytes: int = FRAME_BYTES) -> None:
    """Compress a full chunk beside itself (seekable frames), then drop the plain file."""
    target = path.with_name(path.name + ".zst")
    partial = target.with_name(target.name + ".tmp")
    with open(path, "rb") as source, pyzstd.SeekableZstdFile(partial, "wb", level_or_option=3, max_frame_content_size=frame_bytes) as sealed:
        shutil.copyfileobj(source, sealed, 1 << 20)
    partial.replace(target)
    path.unlink()


class ChunkedStream:
    """prime-rl's `ChunkedJsonl`: lines appended to numbered chunks, sealed when full."""

    def __init__(self, directory: Path, max_bytes: int, compress: bool, frame_bytes: int = FRAME_BYTES) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory, self.max_bytes, self.compress, self.frame_bytes = directory, max_bytes, compress, frame_bytes
        self.sealing: list[threading.Thread] = []
        numbers: dict[int, bool] = {}
        for path in directory.glob("*.jsonl*"):
            number = int(path.name.split(".", 1)[0])
            numbers[number] = numbers.get(number, False) or path.suffix == ".jsonl"
        last = max(numbers, default=-1)
        self.number = last if numbers.get(last) else last + 1
        for number, plain in numbers.items():
            if plain and number != self.number and compress:
                self._seal(number)
        self.file = open(self._path(self.number), "ab")
        self.size = self.file.tell()

    def _path(self, number: int) -> Path:
        return self.directory / f"{number:05d}.jsonl"

    def append(self, line: bytes) -> tuple[int, int]:
        if self.size and self.size + len(line) > self.max_bytes:
            self.file.close()
            if self.compress:
                self._seal(self.number)
            self.number += 1
            self.file = open(self._path(self.number), "ab")
            self.size = 0
        offset = self.size
        self.file.write(line)
        self.size += len(line)
        return self.number, offset

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()
        if not self.size:
            self._path(self.number).unlink()
        elif self.compress:
            self._seal(self.number)
        for thread in self.sealing:
            thread.join()

    def _seal(self, number: int) -> None:
        thread = threading.Thread(target=seal, args=(self._path(number), self.frame_bytes))
        thread.start()
        self.sealing.append(thread)


def index_row(line: int, record: dict[str, Any], chunk: int, offset: int) -> dict[str, Any]:
    """The row prime-rl's `index_row` writes for `record` (its summary without the
    reward, metric and timing maps, plus the chunk)."""
    rewards, advantages, costs = [], [], []
    turns = branches = 0
    stop_condition = None
    truncated = False
    timing: dict[str, float] = {}
    traces = record.get("traces") or []
    for trace in traces:
        costs += [u["cost"] for c in trace.get("calls") or [] if isinstance(u := c.get("usage") or {}, dict) and isinstance(u.get("cost"), (int, float))]
        nodes = trace.get("nodes") or []
        branches += max(0, len(nodes) - len({n.get("parent") for n in nodes if "parent" in n}))
        if trace.get("rewards"):
            rewards.append(sum((r.get("score") or 0) * (r.get("weight") if r.get("weight") is not None else 1) for r in trace["rewards"].values() if isinstance(r, dict)))
        if isinstance(trace.get("timing"), dict):
            _walk_timing(trace["timing"], "", timing)
        if (trace.get("info") or {}).get("advantage") is not None:
            advantages.append(trace["info"]["advantage"])
        turns += sum(1 for n in nodes if (n.get("message") or {}).get("role") == "assistant")
        stop_condition = trace.get("stop_condition", stop_condition)
        last = next((c for c in reversed(trace.get("calls") or []) if c.get("error") is None), None)
        truncated = truncated or trace.get("stop_condition") in TRUNCATING_STOPS or bool(last and last.get("finish_reason") == "length")
    info = (traces[0].get("info") if traces else None) or {}
    dispatched, arrived = (info.get("dispatch") or {}).get("time"), (info.get("arrival") or {}).get("time")
    if isinstance(dispatched, (int, float)) and isinstance(arrived, (int, float)):
        duration: float | None = max(0.0, arrived - dispatched)
    else:
        phases = [value for key, value in timing.items() if "/" not in key]
        duration = sum(phases) if phases else None
    run = record.get("run") or {}
    kind = next((k for t in traces if (k := (t.get("info") or {}).get("kind")) in ("train", "eval")), None)
    return {
        "cost": sum(costs) if costs else None,
        "line": line,
        "offset": offset,
        "id": record.get("id"),
        "kind": kind or (run.get("work") or {}).get("type") or run.get("type") or "eval",
        "trace_ids": [t["id"] for t in traces if t.get("id")],
        "env": (record.get("env") or {}).get("name") or (record.get("env") or {}).get("id"),
        "group": (record.get("group") or {}).get("id"),
        "ok": record.get("ok"),
        "num_errors": len(record.get("errors") or []),
        "reward": sum(rewards) / len(rewards) if rewards else None,
        "advantage": sum(advantages) / len(advantages) if advantages else None,
        "input_tokens": record.get("num_input_tokens"),
        "output_tokens": record.get("num_output_tokens"),
        "turns": turns,
        "branches": branches,
        "stop_condition": stop_condition,
        "truncated": truncated,
        "dispatch": dispatched,
        "arrival": arrived,
        "duration": duration,
        "chunk": chunk,
    }


def _walk_timing(span: dict[str, Any], prefix: str, out: dict[str, float]) -> None:
    if isinstance(span.get("duration"), (int, float)):
        out[prefix] = out.get(prefix, 0.0) + span["duration"]
    elif isinstance(span.get("start"), (int, float)) and isinstance(span.get("end"), (int, float)):
        out[prefix] = out.get(prefix, 0.0) + (span["end"] - span["start"])
    for key, value in span.items():
        if isinstance(value, dict):
            _walk_timing(value, f"{prefix}/{key}" if prefix else key, out)


class FileMonitor:
    """One process's file monitor (`producer`: "orchestrator", "trainer", ...)."""

    def __init__(self, out: Path, producer: str | None = None, chunk_bytes: int = 5 << 30, compress: bool = True, frame_bytes: int = FRAME_BYTES, float_decimals: int | None = 4) -> None:
        self.out, self.producer = out, producer
        self.chunk_bytes, self.compress, self.frame_bytes, self.float_decimals = chunk_bytes, compress, frame_bytes, float_decimals
        self.index_path = traces_dir(out) / "stream.index.jsonl"
        self.logged = sum(1 for _ in self.index_path.open("rb")) if self.index_path.is_file() else 0
        monitor_dir(out).mkdir(parents=True, exist_ok=True)
        self.metrics = open(monitor_dir(out) / "metrics.jsonl", "a", buffering=1)
        self.live_cleared = False
        self.streams: dict[Path, tuple[ChunkedStream, Any]] = {}
        self.lock = threading.Lock()

    def log_metrics(self, metrics: dict[str, Any], step: int | None) -> None:
        row = {"step": step, "time": time.time(), **{k: v for k, v in metrics.items() if not isinstance(v, float) or math.isfinite(v)}}
        if self.producer is not None:
            row["producer"] = self.producer
        self.metrics.write(json.dumps(row) + "\n")

    def log_eval_plan(self, env: str, step: int, expected: int) -> None:
        path = monitor_dir(self.out) / "plan.json"
        plan = orjson.loads(path.read_bytes()) if path.is_file() else {}
        plan.setdefault(env, {})[str(step)] = expected
        tmp = path.with_suffix(".json.tmp")
        tmp.write_bytes(orjson.dumps(plan))
        tmp.replace(path)

    def log_live(self, events: list[dict[str, Any]]) -> None:
        live = traces_dir(self.out) / "live"
        pending = live / "pending"
        if not self.live_cleared:
            shutil.rmtree(live, ignore_errors=True)
            self.live_cleared = True
        pending.mkdir(parents=True, exist_ok=True)
        appends: dict[Path, list[bytes]] = {}
        for event in events:
            if "done" in event:
                appends.pop(live / f"{event['done']}.jsonl", None)
                (live / f"{event['done']}.jsonl").unlink(missing_ok=True)
            elif "pending" in event:
                path = pending / f"{event['pending']}.json"
                tmp = path.with_suffix(".json.tmp")
                tmp.write_bytes(orjson.dumps(event["dispatch"]))
                tmp.replace(path)
            elif "dispatched" in event:
                (pending / f"{event['dispatched']}.json").unlink(missing_ok=True)
            else:
                delta = event["delta"]
                path = live / f"{delta['trace']}.jsonl"
                if delta.get("discard"):
                    appends.pop(path, None)
                    path.unlink(missing_ok=True)
                    continue
                line = {**delta, "dispatch": event["dispatch"]} if "open" in delta else delta
                appends.setdefault(path, []).append(orjson.dumps(line, default=str, option=OPTS | orjson.OPT_NON_STR_KEYS))
        for path, lines in appends.items():
            with path.open("ab") as f:
                f.write(b"".join(line + b"\n" for line in lines))

    def _stream(self, directory: Path) -> tuple[ChunkedStream, Any]:
        if directory not in self.streams:
            stream = ChunkedStream(directory, self.chunk_bytes, self.compress, self.frame_bytes)
            self.streams[directory] = (stream, open(directory.with_name(directory.name + ".index.jsonl"), "ab"))
        return self.streams[directory]

    def log_episodes(self, episodes: list[Any], subset: str = "all") -> list[dict[str, Any]]:
        """Episodes are verifiers `Episode`s; the index rows written are returned."""
        if subset == "effective":
            return []
        rows = []
        with self.lock:
            stream, index = self._stream(traces_dir(self.out) / "stream")
            for episode in episodes:
                record = episode.to_record(float_decimals=self.float_decimals)
                chunk, offset = stream.append(orjson.dumps(record, default=str, option=OPTS))
                self.logged += 1
                rows.append(index_row(self.logged, record, chunk, offset))
                index.write(orjson.dumps(rows[-1], default=str, option=OPTS))
            stream.flush()
            index.flush()
        return rows

    def log_annotations(self, updates: list[dict[str, Any]]) -> None:
        if not updates:
            return
        with self.lock:
            stream, index = self._stream(traces_dir(self.out) / "annotations" / (self.producer or "unknown"))
            for update in updates:
                chunk, offset = stream.append(orjson.dumps(update, option=OPTS))
                index.write(orjson.dumps({"trace_id": update.get("trace_id"), "chunk": chunk, "offset": offset, "info": update.get("info") or {}}, option=OPTS))
            stream.flush()
            index.flush()

    def finalize(self) -> None:
        for stream, index in self.streams.values():
            stream.close()
            index.close()
        self.metrics.close()


def make_update(trace_id: str, info: dict[str, Any] | None = None, branches: dict[int, dict[str, list[Any]]] | None = None) -> dict[str, Any]:
    return {"version": 1, "trace_id": trace_id, "info": info or {}, "branches": [{"index": i, **streams} for i, streams in (branches or {}).items()]}
