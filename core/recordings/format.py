"""The recording format: every stream the app watched, kept on disk to replay or export later.

A recording is a msgpack stream: one map per record, concatenated, after a versioned
header map `{"format": "tracewatch-recording", "version": 1, "created", "meta"}`.
Each record has `k` (its kind) and `t` (arrival epoch time):

- `rollout`: `id` (our rollout key, e.g. "baseline/3"), `variant`, `task_index`,
  `task_data`, `rollout_index`: a rollout was announced;
- `request`: `id`, `request_id`: the wire id of a run of that rollout;
- `delta`: `id`, `d`: one delta exactly as received;
- `reply`: `id`, `r`: the run's reply (`success`, `error`, `head`, `traces`), or a
  reply the app made up for a run that ended without one; `end`: how the rollout
  ended, `{"status": "done" | "failed" | "cancelled", "reason"}` (absent in
  recordings made before it; `core.recordings.ending` reads both);
- `event`: `variant`, `kind` (started, healthy, cancelling, exited, failed, ...)
  plus that event's own fields (pid, code, reason, ...).

Readers ignore kinds and fields they do not know, so later versions can add them
without a version bump; the version changes only when a reader of this one would
misread the file.

Appends only pack into memory; a writer thread puts batches on disk at most
`flush_interval` after their first record, so a crash loses at most that last batch
and the asyncio loop never waits on the disk.
"""

from __future__ import annotations

from typing import Any

import msgpack

from core.wire.protocol import UNPACK_OPTIONS

FORMAT = "tracewatch-recording"
VERSION = 1
SUFFIX = ".twrec"

READ_SIZE = 1 << 20
MAX_RECORD = 1 << 30
"""The largest single record a reader accepts; far above any delta (a routed-experts
array for a 100k-token node is ~40 MB), small enough that a corrupt length cannot
make a reader ask for the whole disk."""

MAGIC = msgpack.packb("format") + msgpack.packb(FORMAT)
"""What follows the header's map marker: a file cut inside its header is still
recognisably ours."""


class RecordingError(ValueError):
    """The file is not a recording this version can read."""


def open_unpacker(file: Any) -> msgpack.Unpacker:
    return msgpack.Unpacker(
        file,
        read_size=READ_SIZE,
        max_buffer_size=MAX_RECORD,
        **UNPACK_OPTIONS,
    )


