"""What reading the token arrays for the table's flags costs an opened recording's index.

`RecordingIndex.build` reads each node's `mask`, `token_ids` and compact streams for
its flags (`tracewatch.core.tokens.flags`). Prints, for the same training-shaped recording
(`bench.recording`'s stream: tool results and assistant turns with ids, masks and
logprobs), the index's CPU time against two baselines measured in the same run, in
alternated rounds: the index of the same records with every token array left out,
and the same index with its flag fields skipped (what it cost before flags).

Run: `python -m bench.index_flags [--deltas N] [--rounds R]`. Temp files are deleted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tracewatch.core.recordings.index as index_module
from bench.recording import make_stream, write_recorder
from tracewatch.core.recordings.index import RecordingIndex

TOKEN_FIELDS = ("token_ids", "mask", "is_content", "logprobs", "routed_experts")


def without_token_arrays(stream: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    stripped = []
    for kind, fields in stream:
        nodes = fields.get("delta", {}).get("nodes") if kind == "delta" else None
        if nodes:
            kept = [{key: value for key, value in node.items() if key not in TOKEN_FIELDS} for node in nodes]
            fields = {**fields, "delta": {**fields["delta"], "nodes": kept}}
        stripped.append((kind, fields))
    return stripped


def cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tracewatch-bench-"))
    try:
        stream = make_stream(args.deltas)
        full, bare = folder / "full.twrec", folder / "bare.twrec"
        write_recorder(full, stream)
        write_recorder(bare, without_token_arrays(stream))
        flagged = index_module._FLAGGED_FIELDS

        def unflagged() -> object:
            index_module._FLAGGED_FIELDS = frozenset({"sampled"})
            try:
                return RecordingIndex.build(full)
            finally:
                index_module._FLAGGED_FIELDS = flagged

        runs: dict[str, list[float]] = {"index": [], "no token arrays": [], "flag fields skipped": []}
        for _ in range(args.rounds):
            runs["index"].append(cpu(lambda: RecordingIndex.build(full)))
            runs["no token arrays"].append(cpu(lambda: RecordingIndex.build(bare)))
            runs["flag fields skipped"].append(cpu(unflagged))
        base = statistics.median(runs["index"])
        print(f"recording {full.stat().st_size / 1e6:.0f} MB ({args.deltas:,} deltas), without token arrays {bare.stat().st_size / 1e6:.0f} MB")
        print(f"load {os.getloadavg()[0]:.1f}; CPU seconds, median of {args.rounds} alternated rounds")
        for name, seconds in runs.items():
            median = statistics.median(seconds)
            print(f"  {name:22} {median:7.3f} s   index / this = {base / median:5.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
