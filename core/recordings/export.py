"""Recordings out as JSON: for tools that cannot read msgpack, and for verifiers.

JSON cannot hold bytes, and the wire carries some (encoded arrays: `{"__nd__": true,
"dtype", "shape", "data": <bytes>}`). Every bytes value is written as
`{"__base64__": "<standard base64 of the bytes>"}`, a marker no wire value uses, so a
reader can restore it exactly. Non-finite floats (NaN, inf) become null, as verifiers'
own JSON dumps write them; integer map keys (node indices) become strings, as in any
JSON.
"""

from __future__ import annotations

import base64
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from core.recordings.index import RecordingIndex
from core.recordings.reader import read_recording
from core.wire.assembly import AssemblyError, EpisodeAssembly

BYTES_MARKER = "__base64__"


def json_safe(value: Any) -> Any:
    """`value` with bytes marked as base64 and non-finite floats as None."""
    if isinstance(value, Mapping):
        return {key if isinstance(key, str) else str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {BYTES_MARKER: base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def episode_json(record: Mapping[str, Any]) -> str:
    """One assembled episode (head + traces, as `EpisodeAssembly.finish` returns it and
    verifiers' client assembles it) as one line of JSON."""
    return _dumps(record)


def rebuild_episodes(records: Iterable[Mapping[str, Any]]) -> dict[str, dict]:
    """Replay recorded deltas and replies through `EpisodeAssembly`: the episode of
    every rollout whose run replied with one, by rollout id, in reply order. A
    `request` record starts a fresh episode (a rollout run again). A stream that does
    not assemble raises `AssemblyError` naming the rollout."""
    assemblies: dict[str, EpisodeAssembly] = {}
    episodes: dict[str, dict] = {}
    for record in records:
        kind = record.get("k")
        rollout_id = record.get("id")
        try:
            if kind == "request":
                assemblies[rollout_id] = EpisodeAssembly()
            elif kind == "delta":
                assemblies.setdefault(rollout_id, EpisodeAssembly()).apply(record["d"])
            elif kind == "reply":
                reply = record["r"]
                assembly = assemblies.pop(rollout_id, None) or EpisodeAssembly()
                if reply.get("success") and reply.get("head") is not None:
                    episodes[rollout_id] = assembly.finish(reply["head"], reply.get("traces") or ())
        except AssemblyError as error:
            raise AssemblyError(f"rollout {rollout_id}: {error}") from error
    return episodes


def export_recording(
    path_in: str | os.PathLike[str], path_out: str | os.PathLike[str], *, episodes: bool = False
) -> tuple[int, str | None]:
    """Write a recording as JSONL and return (lines written, the reader's note if the
    recording was cut short).

    By default every record, in order, after the header line. With `episodes`, one
    assembled episode per line instead (rollouts that replied with one), the shape
    of a verifiers `traces.jsonl`; rollouts are rebuilt one at a time from the
    index, so memory holds one rollout, not the recording. The output appears only
    when complete (written beside it, then renamed) and is private (0600), as the
    recording is.
    """
    path_out = Path(path_out)
    partial = path_out.with_name(f".{path_out.name}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    lines = 0
    try:
        with open(fd, "w", encoding="utf-8") as out:
            if episodes:
                index = RecordingIndex.build(path_in)
                note = index.truncated
                for rollout_id in index.rollouts:
                    for episode in rebuild_episodes(index.load(rollout_id)).values():
                        out.write(episode_json(episode) + "\n")
                        lines += 1
            else:
                recording = read_recording(path_in)
                out.write(_dumps(recording.header) + "\n")
                lines += 1
                for record in recording:
                    out.write(_dumps(record) + "\n")
                    lines += 1
                note = recording.truncated
        os.replace(partial, path_out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return lines, note


def _dumps(value: Any) -> str:
    return json.dumps(json_safe(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
