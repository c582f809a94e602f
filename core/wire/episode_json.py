"""Episodes and wire values as JSON: for tools that cannot read msgpack, and for verifiers.

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
from collections.abc import Iterable, Mapping
from typing import Any

from tracewatch.core.wire.packed_list import PackedList
from tracewatch.core.wire.protocol import Packed

BYTES_MARKER = "__base64__"

JSON_DEPTH = 200
"""Deeper than any delta the assembly keeps (`delta_checks.MAX_DEPTH`) plus a record
around it; a hostile token array can still be deeper, and is refused, not recursed."""


def json_safe(value: Any, depth: int = 0) -> Any:
    """`value` with bytes marked as base64 and non-finite floats as None; ValueError
    for anything nested deeper than `JSON_DEPTH`."""
    if depth > JSON_DEPTH:
        raise ValueError(f"a value is nested deeper than {JSON_DEPTH} levels: it cannot be written as JSON")
    if isinstance(value, Mapping):
        return {key if isinstance(key, str) else str(key): json_safe(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple, Packed, PackedList)):
        return [json_safe(item, depth + 1) for item in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {BYTES_MARKER: base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_line(value: Any) -> str:
    """Any wire value as one line of JSON (see `json_safe`)."""
    return json.dumps(json_safe(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def episode_json(record: Mapping[str, Any]) -> str:
    """One assembled episode (head + traces, as `EpisodeAssembly.finish` returns it and
    verifiers' client assembles it) as one line of JSON."""
    return json_line(record)


def partial_episode(task_data: Mapping[str, Any], traces: Iterable[Mapping[str, Any]], reason: str | None) -> dict[str, Any]:
    """A rollout that ended without an episode (cancelled, failed, still running): the
    traces assembled so far, marked `partial`, with why."""
    return {"task": {"data": task_data}, "partial": True, "ok": False, "error": reason, "traces": list(traces)}
