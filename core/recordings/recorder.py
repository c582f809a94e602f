"""Writing a recording: appends pack into memory; a writer thread puts batches on disk
at most `flush_interval` after their first record, so a crash loses at most that last
batch and the asyncio loop never waits on the disk."""

from __future__ import annotations

import bisect
import os
import threading
import time
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgpack

from tracewatch.core.errors import TracewatchError
from tracewatch.core.paths import make_private_dirs
from tracewatch.core.recordings.ending import end_field
from tracewatch.core.recordings.file_format import FORMAT, ROLLOUT_KINDS, VERSION
from tracewatch.core.session.status import Ending
from tracewatch.core.wire.protocol import WireDelta, packable

_DELTA_HEAD = msgpack.Packer().pack_map_header(4) + b"".join(map(msgpack.packb, ("k", "delta", "t")))
"""A delta record's first bytes, the same in every one: a map of four, its kind, and
the key of its time."""
_ID_KEY, _FRAME_KEY = msgpack.packb("id"), msgpack.packb("d")


class RolloutSpans:
    """Where one rollout's records are in the file (offset and length of each, 12
    bytes a record), kept as they are appended so its traces can be read back after
    they left memory (`tracewatch.core.recordings.eviction`) without indexing the file."""

    __slots__ = ("offsets", "lengths", "replied")

    def __init__(self) -> None:
        self.offsets = array("q")
        self.lengths = array("L")
        self.replied = False
        """Its reply (how it ended) is among them."""

    @property
    def end(self) -> int:
        """The offset just past its last record."""
        return self.offsets[-1] + self.lengths[-1] if self.offsets else 0


class RecorderError(TracewatchError, OSError):
    """A recording that could not begin (its header did not fit on the disk): said with
    its path, and no empty file left behind."""


class Recorder:
    """Appends records to a new recording file.

    Appends are safe from any thread and never touch the disk. If a write fails
    (disk full, file system gone) recording stops, `error` says what happened and
    where, and later appends are dropped: a broken recording must never break the
    runs it watches. The file then holds every batch written before the failure.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        meta: Mapping[str, Any] | None = None,
        flush_interval: float = 0.2,
        max_batch: int = 8 << 20,
    ) -> None:
        self.path = Path(path)
        self.flush_interval = flush_interval
        self.max_batch = max_batch
        """A batch this large is written at once, so a burst cannot pile up in memory."""
        self.error: str | None = None
        make_private_dirs(self.path.parent)
        # O_EXCL: keeping every stream means never overwriting one.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
        self._fd = os.open(self.path, flags, 0o600)
        self._packer = msgpack.Packer(use_bin_type=True, default=packable)
        header = {"format": FORMAT, "version": VERSION, "created": time.time(), "meta": dict(meta or {})}
        packed = self._packer.pack(header)
        written, error = _write_some(self._fd, packed)
        if error is not None or written < len(packed):
            os.close(self._fd)
            self.path.unlink(missing_ok=True)  # a header cut short is no recording: leave nothing
            raise RecorderError(
                f"cannot record to {self.path}: {error.strerror if error else 'short write'} while writing its "
                f"{len(packed):,}-byte header. Free some space, record elsewhere (--record, TRACEWATCH_HOME) or not at all (--no-record)."
            )
        self._start = len(packed)  # where the first record goes
        self._spans: dict[str, RolloutSpans] = {}
        self.replied: list[str] = []
        """Rollout ids in the order their replies were appended."""
        self._cond = threading.Condition()
        self._buffer = bytearray()
        self._since = 0.0  # monotonic time of the oldest unwritten append
        self._appended = 0  # bytes appended, ever
        self._written = 0  # bytes on disk, ever
        self._ends: list[int] = []
        """Where each buffered record ends, in bytes appended ever: a batch cut short by a
        full disk still counts the records it put on disk whole."""
        self.records_written = 0
        """Records wholly on disk: where the recording stops if writing fails."""
        self._flush_now = False
        self._closing = False
        self._thread = threading.Thread(target=self._write_loop, name=f"recorder {self.path.name}", daemon=True)
        self._thread.start()

    def rollout(
        self,
        id: str,
        variant: str,
        task_index: int,
        task_data: Mapping[str, Any],
        rollout_index: int,
        t: float | None = None,
        run: int = 1,
        task_key: str | None = None,
    ) -> None:
        record = {
            "k": "rollout",
            "t": _now(t),
            "id": id,
            "variant": variant,
            "task_index": task_index,
            "task_data": task_data,
            "rollout_index": rollout_index,
            "run": run,
        }
        if task_key is not None:
            record["task_key"] = task_key
        self._append(record)

    def request(self, id: str, request_id: str, t: float | None = None, running_t: float | None = None) -> None:
        """`running_t`: when the run began running, if known before its first delta is."""
        record = {"k": "request", "t": _now(t), "id": id, "request_id": request_id}
        if running_t is not None:
            record["running_t"] = running_t
        self._append(record)

    def cancelling(self, id: str, t: float | None = None) -> None:
        """The run was asked to abort: what ends it next ends it cancelled, and a replay
        must know that as live did."""
        self._append({"k": "cancelling", "t": _now(t), "id": id})

    def delta(self, id: str, delta: WireDelta, t: float | None = None) -> None:
        self._append({"k": "delta", "t": _now(t), "id": id, "d": delta})

    def delta_frame(self, id: str, frame: bytes, t: float | None = None) -> None:
        """A delta as the wire carried it: `frame` is one msgpack map (the client
        decoded it whole before handing it on), spliced in as the record's `d`, so a
        reader sees the same record `delta` writes without the delta being packed
        again."""
        with self._cond:  # the packer is shared; the lock is re-entrant
            pack = self._packer.pack
            self._append_bytes(_DELTA_HEAD, pack(_now(t)), _ID_KEY, pack(id), _FRAME_KEY, frame, id=id)

    def reply(self, id: str, reply: Mapping[str, Any], ending: Ending | None = None, t: float | None = None) -> None:
        """The run's reply and how the rollout ended (see `tracewatch.core.recordings.ending`)."""
        record: dict[str, Any] = {"k": "reply", "t": _now(t), "id": id, "r": reply}
        if ending is not None:
            record["end"] = end_field(ending)
        self._append(record)

    def event(self, variant: str, kind: str, t: float | None = None, **fields: Any) -> None:
        if "k" in fields:
            raise ValueError("an event field cannot be named 'k': it holds the record kind")
        self._append({"k": "event", "t": _now(t), "variant": variant, "kind": kind, **fields})

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything appended so far is on disk (or recording failed);
        false if `timeout` passed first."""
        with self._cond:
            target = self._appended
            if self._written < target:
                self._flush_now = True
                self._cond.notify_all()
            return self._cond.wait_for(
                lambda: self._written >= target or self.error is not None or not self._thread.is_alive(),
                timeout,
            )

    def close(self) -> None:
        """Write what is buffered and close the file; later calls do nothing. Blocks
        on that last write: call it from a worker thread if that matters."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        try:
            os.fsync(self._fd)
        except OSError as error:
            self._fail(error, "syncing")
        finally:
            os.close(self._fd)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def spans_on_disk(self, id: str) -> RolloutSpans | None:
        """A copy of where that rollout's records are, once its reply is appended and
        every one of them is on disk (a recording that failed later keeps them); None
        before that."""
        with self._cond:
            spans = self._spans.get(id)
            if spans is None or not spans.replied or spans.end > self._start + self._written:
                return None
            copy = RolloutSpans()
            copy.offsets, copy.lengths, copy.replied = array("q", spans.offsets), array("L", spans.lengths), True
            return copy

    def _append(self, record: dict[str, Any]) -> None:
        with self._cond:
            # packed now, so a caller may change its dicts once the call returns
            kind = record["k"]
            self._append_bytes(self._packer.pack(record), id=record["id"] if kind in ROLLOUT_KINDS else None)
            if kind == "reply" and self.error is None:
                self._spans[record["id"]].replied = True
                self.replied.append(record["id"])

    def _append_bytes(self, *parts: bytes, id: str | None = None) -> None:
        with self._cond:
            if self._closing:
                raise ValueError(f"recording {self.path} is closed")
            if self.error is not None:
                return
            size = sum(map(len, parts))
            if id is not None:
                spans = self._spans.get(id)
                if spans is None:
                    spans = self._spans[id] = RolloutSpans()
                spans.offsets.append(self._start + self._appended)
                spans.lengths.append(size)
            if not self._buffer:
                self._since = time.monotonic()
                self._cond.notify_all()
            for data in parts:
                self._buffer += data
            self._appended += size
            self._ends.append(self._appended)
            if len(self._buffer) >= self.max_batch:
                self._cond.notify_all()

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._buffer:
                        due = self._since + self.flush_interval - time.monotonic()
                        if due <= 0 or self._closing or self._flush_now or len(self._buffer) >= self.max_batch:
                            break
                        self._cond.wait(due)
                    elif self._closing:
                        return
                    else:
                        self._cond.wait()
                batch, self._buffer = self._buffer, bytearray()
                ends, self._ends = self._ends, []
                self._flush_now = False
            written, error = _write_some(self._fd, batch)
            with self._cond:
                self.records_written += bisect.bisect_right(ends, self._written + written)
                self._written += written
                if error is not None:
                    self._fail(error, f"writing a batch of {len(batch):,} bytes ({written:,} of them written)")
                    self._buffer = bytearray()
                self._cond.notify_all()
            if error is not None:
                return

    def _fail(self, error: OSError, doing: str) -> None:
        if self.error is None:
            self.error = (
                f"recording to {self.path} stopped after {self.records_written:,} records "
                f"({self._start + self._written:,} bytes): {error.strerror or error} while {doing}; "
                "the file keeps every record before that, later ones are lost. Free some space "
                "or record elsewhere (--record, TRACEWATCH_HOME)."
            )


def _now(t: float | None) -> float:
    return time.time() if t is None else t


def _write_some(fd: int, data: bytes | bytearray) -> tuple[int, OSError | None]:
    """All of `data`, else how much of it reached the file before the write failed
    (a full disk takes a batch's first bytes, then refuses the rest)."""
    view = memoryview(data)
    written = 0
    while written < len(view):
        try:
            written += os.write(fd, view[written:])
        except OSError as error:
            return written, error
    return written, None


