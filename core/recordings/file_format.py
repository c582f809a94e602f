"""The recording format: its constants, and what a reader checks in each record.

A recording is a msgpack stream of maps after a versioned header; each record has `k`
(its kind: rollout, request, delta, reply, event) and `t` (arrival epoch time). The
format, every kind's fields and what readers may rely on are described once, in
docs/recording-format.md. Readers ignore kinds and fields they do not know, so the
version changes only when a reader of this one would misread a file.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack

from tracewatch.core.errors import TracewatchError
from tracewatch.core.wire.protocol import UNPACK_OPTIONS

FORMAT = "tracewatch-recording"
VERSION = 1

READ_SIZE = 1 << 20
MAX_RECORD = 1 << 30
"""The largest single record a reader accepts; far above any delta (a routed-experts
array for a 100k-token node is ~40 MB), small enough that a corrupt length cannot
make a reader ask for the whole disk."""

MAGIC = msgpack.packb("format") + msgpack.packb(FORMAT)
"""What follows the header's map marker: a file cut inside its header is still
recognisably ours."""


class RecordingError(TracewatchError, ValueError):
    """The file is not a recording this version can read."""


def open_unpacker(file: Any) -> msgpack.Unpacker:
    return msgpack.Unpacker(
        file,
        read_size=READ_SIZE,
        max_buffer_size=MAX_RECORD,
        **UNPACK_OPTIONS,
    )




_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "rollout": {"id": (str,), "variant": (str,), "task_index": (int,), "task_data": (dict,), "rollout_index": (int,)},
    "request": {"id": (str,), "request_id": (str,)},
    "cancelling": {"id": (str,)},
    "delta": {"id": (str,)},
    "reply": {"id": (str,), "r": (dict,)},
    "event": {"variant": (str,), "kind": (str,)},
}
"""The fields each kind of record must have, and their types (a delta's `d` is judged
by the assembly, as live)."""

_EVENT_FIELDS: dict[str, tuple[type, ...]] = {"reason": (str,), "pid": (int,), "address": (str,), "outcome": (str,)}

MAX_EPOCH = 1e11
"""Arrival times are epoch seconds; a flipped exponent makes one absurd."""


def record_problem(record: dict[str, Any]) -> str | None:
    """Why a record read back is not one this format writes (a damaged file), or None.
    Kinds this version does not know pass: later versions may add them."""
    t = record.get("t")
    if t is not None and (type(t) not in (int, float) or not math.isfinite(t) or not 0 <= t <= MAX_EPOCH):
        return f"its time is {t!r}"
    kind = record.get("k")
    fields = _FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        return None
    if kind == "delta" and "d" not in record:
        return "a delta record without its delta"
    if kind == "event":
        fields = {**fields, **_EVENT_FIELDS}
    for name, types in fields.items():
        value = record.get(name)
        required = name in ("id", "variant", "kind", "request_id", "r")
        if (value is None and required) or (value is not None and (type(value) not in types)):
            return f"a {kind} record's {name} is {type(value).__name__}"
    return None


class Damage:
    """Damaged records met while reading a recording: counted, the first described."""

    def __init__(self) -> None:
        self.skipped = 0
        self.first: str | None = None

    def check(self, record: dict[str, Any], where: Any, announced: Any = None) -> bool:
        """True (and counted) if `record` is damaged; with `announced` (the rollout ids
        seen so far), also a record of a rollout never announced, or announced twice."""
        problem = record_problem(record)
        if problem is None and announced is not None and record.get("k") in ROLLOUT_KINDS:
            known = record["id"] in announced
            if known == (record["k"] == "rollout"):
                problem = f"rollout {record['id']!r} was {'already' if known else 'never'} announced"
        if problem is not None:
            self.count(f"{problem} (at {where})")
        return problem is not None

    def count(self, problem: str) -> None:
        self.skipped += 1
        if self.first is None:
            self.first = problem

    def note(self, before: str | None, path: Any) -> str | None:
        """`before` (the reader's own note) with what was skipped here added."""
        if not self.skipped:
            return before
        mine = f"{self.skipped} damaged record(s) skipped, the first: {self.first}"
        return f"{before}; {mine}" if before else f"{path}: {mine}"


ROLLOUT_KINDS = ("rollout", "request", "cancelling", "delta", "reply")
"""The kinds of record that belong to one rollout (they carry its `id`)."""
