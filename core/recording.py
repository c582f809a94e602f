"""Recordings: every stream the app watched, kept on disk to replay or export later.

A recording is a msgpack stream: one map per record, concatenated, after a versioned
header map `{"format": "tracewatch-recording", "version": 1, "created", "meta"}`.
Each record has `k` (its kind) and `t` (arrival epoch time):

- `rollout`: `id` (our rollout key, e.g. "baseline/3"), `variant`, `task_index`,
  `task_data`, `rollout_index`: a rollout was announced;
- `request`: `id`, `request_id`: the wire id of a run of that rollout;
- `delta`: `id`, `d`: one delta exactly as received;
- `reply`: `id`, `r`: the run's reply (`success`, `error`, `head`, `traces`), or a
  reply the app made up for a run that ended without one;
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

import os
import threading
import time
from array import array
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Callable

import msgpack

from core.store import episode_reward
from core.wire import ABORTED_ERROR

FORMAT = "tracewatch-recording"
VERSION = 1
SUFFIX = ".twrec"

_READ_SIZE = 1 << 20
_MAX_RECORD = 1 << 30
"""The largest single record a reader accepts; far above any delta (a routed-experts
array for a 100k-token node is ~40 MB), small enough that a corrupt length cannot
make a reader ask for the whole disk."""

_MAGIC = msgpack.packb("format") + msgpack.packb(FORMAT)
"""What follows the header's map marker: a file cut inside its header is still
recognisably ours."""


class RecordingError(ValueError):
    """The file is not a recording this version can read."""


def tracewatch_home() -> Path:
    """`$TRACEWATCH_HOME`, else `$XDG_STATE_HOME/tracewatch`, else
    `~/.local/state/tracewatch`: recordings are state, not config or cache."""
    home = os.environ.get("TRACEWATCH_HOME")
    if home:
        return Path(home).expanduser()
    state = os.environ.get("XDG_STATE_HOME")
    # the XDG spec says to ignore a relative value
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "tracewatch"


def default_recording_path() -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return tracewatch_home() / "recordings" / f"{stamp}-{os.getpid()}{SUFFIX}"


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
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # O_EXCL: keeping every stream means never overwriting one.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
        self._fd = os.open(self.path, flags, 0o600)
        self._packer = msgpack.Packer(use_bin_type=True)
        header = {"format": FORMAT, "version": VERSION, "created": time.time(), "meta": dict(meta or {})}
        try:
            _write_all(self._fd, self._packer.pack(header))
        except BaseException:
            os.close(self._fd)
            raise
        self._cond = threading.Condition()
        self._buffer = bytearray()
        self._since = 0.0  # monotonic time of the oldest unwritten append
        self._appended = 0  # bytes appended, ever
        self._written = 0  # bytes on disk, ever
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
    ) -> None:
        self._append(
            {
                "k": "rollout",
                "t": _now(t),
                "id": id,
                "variant": variant,
                "task_index": task_index,
                "task_data": task_data,
                "rollout_index": rollout_index,
            }
        )

    def request(self, id: str, request_id: str, t: float | None = None) -> None:
        self._append({"k": "request", "t": _now(t), "id": id, "request_id": request_id})

    def delta(self, id: str, delta: Mapping[str, Any], t: float | None = None) -> None:
        self._append({"k": "delta", "t": _now(t), "id": id, "d": delta})

    def reply(self, id: str, reply: Mapping[str, Any], t: float | None = None) -> None:
        self._append({"k": "reply", "t": _now(t), "id": id, "r": reply})

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

    def _append(self, record: dict) -> None:
        with self._cond:
            if self._closing:
                raise ValueError(f"recording {self.path} is closed")
            if self.error is not None:
                return
            # packed now, so a caller may change its dicts once the call returns
            data = self._packer.pack(record)
            if not self._buffer:
                self._since = time.monotonic()
                self._cond.notify_all()
            self._buffer += data
            self._appended += len(data)
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
                self._flush_now = False
            try:
                _write_all(self._fd, batch)
            except OSError as error:
                with self._cond:
                    self._fail(error, f"writing a batch of {len(batch)} bytes")
                    self._buffer = bytearray()
                    self._cond.notify_all()
                return
            with self._cond:
                self._written += len(batch)
                self._cond.notify_all()

    def _fail(self, error: OSError, doing: str) -> None:
        if self.error is None:
            self.error = (
                f"recording to {self.path} stopped: {error.strerror or error} while {doing}; "
                "the file keeps everything before it. Free some space or record elsewhere "
                "(TRACEWATCH_HOME)."
            )


def _now(t: float | None) -> float:
    return time.time() if t is None else t


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _unpacker(file: Any) -> msgpack.Unpacker:
    return msgpack.Unpacker(
        file,
        read_size=_READ_SIZE,
        max_buffer_size=_MAX_RECORD,
        raw=False,
        strict_map_key=False,  # `links` and `routing_repairs` are keyed by node index
    )


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _read_header(path: Path) -> tuple[dict, int, str | None]:
    """The header, the offset of the first record, and a note if the file ends
    inside the header."""
    try:
        file = open(path, "rb")
    except OSError as error:
        raise RecordingError(f"cannot open recording {path}: {error.strerror or error}") from None
    with file:
        unpacker = _unpacker(file)
        try:
            header = unpacker.unpack()
        except msgpack.OutOfData:
            file.seek(0)
            head = file.read(1 + len(_MAGIC))
            if head and not (0x80 <= head[0] <= 0x8F and _MAGIC.startswith(head[1:])):
                raise RecordingError(f"{path} is not a tracewatch recording (it is not msgpack)") from None
            size = os.fstat(file.fileno()).st_size
            where = "is empty" if size == 0 else f"is cut inside its header at byte {size}"
            return {}, size, f"{path} {where}: no records"
        except (ValueError, TypeError, msgpack.UnpackException) as error:
            raise RecordingError(f"{path} is not a tracewatch recording ({error})") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise RecordingError(
                f"{path} is not a tracewatch recording: it starts with {_describe(header)}, "
                f"not a header with format {FORMAT!r}"
            )
        version = header.get("version")
        if not isinstance(version, int) or not 1 <= version <= VERSION:
            raise RecordingError(
                f"{path} is a tracewatch recording of format version {version!r}; this "
                f"tracewatch reads version {VERSION}: open it with the tracewatch that wrote it"
            )
        return header, unpacker.tell(), None


Reader = Callable[[msgpack.Unpacker], Any]


class _Scan:
    """One pass over a recording's records, from `start`, yielding (offset, length,
    record). On a cut or unreadable record it stops and leaves `note` saying where."""

    def __init__(self, path: Path, start: int, read: Reader) -> None:
        self.path = path
        self.start = start
        self.read = read
        self.count = 0
        self.note: str | None = None

    def __iter__(self) -> Iterator[tuple[int, int, Any]]:
        with open(self.path, "rb") as file:
            file.seek(self.start)
            unpacker = _unpacker(file)
            offset = self.start
            while True:
                try:
                    record = self.read(unpacker)
                except msgpack.OutOfData:
                    size = file.tell()
                    if size > offset:
                        self.note = (
                            f"{self.path}: cut at byte {offset} of {size} inside a record "
                            f"({size - offset} bytes of it); {self.count} records read"
                        )
                    return
                except (ValueError, TypeError, msgpack.UnpackException) as error:
                    self.note = (
                        f"{self.path}: unreadable data at byte {offset} ({error}); "
                        f"{self.count} records read before it"
                    )
                    return
                end = self.start + unpacker.tell()
                if not isinstance(record, dict):
                    self.note = (
                        f"{self.path}: unreadable data at byte {offset} (a {type(record).__name__}, "
                        f"not a record); {self.count} records read before it"
                    )
                    return
                self.count += 1
                yield offset, end - offset, record
                offset = end


class Recording:
    """A recording opened for reading: `header`, then its records in order by
    iterating (each pass reads the file afresh, so a recording still being written
    shows what has landed). After a pass, `truncated` says where a cut or damaged
    file stopped, or is None."""

    def __init__(self, path: Path, header: dict, start: int, truncated: str | None) -> None:
        self.path = path
        self.header = header
        self.truncated = truncated
        self.records_read = 0
        self._start = start
        self._header_cut = truncated is not None

    def __iter__(self) -> Iterator[dict]:
        if self._header_cut:
            return
        scan = _Scan(self.path, self._start, msgpack.Unpacker.unpack)
        for _offset, _length, record in scan:
            self.records_read = scan.count
            yield record
        self.records_read = scan.count
        self.truncated = scan.note


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """Open a recording; raises `RecordingError` for a file of another format or a
    newer version."""
    path = Path(path)
    header, start, note = _read_header(path)
    return Recording(path, header, start, note)


class RolloutSummary:
    """What the index keeps of one rollout: its announcement, counts, outcome, and
    where its records are (not the records)."""

    __slots__ = (
        "id",
        "announce",
        "request_ids",
        "deltas",
        "first_t",
        "last_t",
        "reply",
        "_rewards",
        "_offsets",
        "_lengths",
    )

    def __init__(self, id: str) -> None:
        self.id = id
        self.announce: dict | None = None
        self.request_ids: list[str] = []
        self.deltas = 0
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.reply: dict | None = None
        """The reply's outcome: `success`, `error`, and `ok` from its head."""
        self._rewards: dict[str, Any] = {}  # trace id -> its latest `rewards`
        self._offsets = array("q")
        self._lengths = array("L")

    @property
    def records(self) -> int:
        return len(self._offsets)

    @property
    def status(self) -> str:
        """running (no reply recorded), ok, error (the episode did not succeed),
        cancelled, or failed (the run has no episode)."""
        if self.reply is None:
            return "running"
        if not self.reply["success"]:
            aborted = str(self.reply["error"]).startswith(ABORTED_ERROR.split(":")[0])
            return "cancelled" if aborted else "failed"
        return "ok" if self.reply["ok"] else "error"

    @property
    def reward(self) -> float | None:
        """As the store computes it for a loaded rollout (`episode_reward`)."""
        return episode_reward(self._rewards.values())

    def _add(self, offset: int, length: int, record: dict) -> None:
        self._offsets.append(offset)
        self._lengths.append(length)
        t = record.get("t")
        if isinstance(t, (int, float)):
            self.first_t = t if self.first_t is None else self.first_t
            self.last_t = t
        kind = record.get("k")
        if kind == "rollout":
            self.announce = record
        elif kind == "request":
            self.request_ids.append(record.get("request_id"))
        elif kind == "delta":
            self.deltas += 1
            delta = record.get("d") or {}
            scalars = delta.get("set")
            if isinstance(scalars, dict) and "rewards" in scalars:
                self._rewards[delta.get("trace")] = scalars["rewards"]
        elif kind == "reply":
            reply = record.get("r") or {}
            head = reply.get("head")
            self.reply = {
                "success": bool(reply.get("success")),
                "error": reply.get("error"),
                "ok": bool(head.get("ok")) if isinstance(head, dict) else False,
            }


def _read_for_index(unpacker: msgpack.Unpacker) -> dict:
    """A record with only what the index keeps decoded: a delta's `trace` and `set`;
    its node and call lists, the bulk of a recording, are skipped undecoded."""
    record = {}
    for _ in range(unpacker.read_map_header()):
        key = unpacker.unpack()
        if key != "d":
            record[key] = unpacker.unpack()
            continue
        delta = record[key] = {}
        for _ in range(unpacker.read_map_header()):
            field = unpacker.unpack()
            if field in ("trace", "set"):
                delta[field] = unpacker.unpack()
            else:
                unpacker.skip()
    return record


class RecordingIndex:
    """Where each rollout's records are in a recording, built in one pass so that a
    recording far larger than memory opens at once and loads a rollout on demand.
    Per record it keeps an offset and a length (12 bytes)."""

    def __init__(self, path: Path, header: dict) -> None:
        self.path = path
        self.header = header
        self.rollouts: dict[str, RolloutSummary] = {}
        """By rollout id, in the order they were announced."""
        self.events: list[dict] = []
        self.records = 0
        self.truncated: str | None = None

    @classmethod
    def build(cls, path: str | os.PathLike[str]) -> RecordingIndex:
        path = Path(path)
        header, start, note = _read_header(path)
        index = cls(path, header)
        index.truncated = note
        if note is not None:
            return index
        scan = _Scan(path, start, _read_for_index)
        for offset, length, record in scan:
            rollout_id = record.get("id")
            if rollout_id is not None:
                summary = index.rollouts.get(rollout_id)
                if summary is None:
                    summary = index.rollouts[rollout_id] = RolloutSummary(rollout_id)
                summary._add(offset, length, record)
            elif record.get("k") == "event":
                index.events.append(record)
        index.records = scan.count
        index.truncated = scan.note
        return index

    def load(self, rollout_id: str) -> list[dict]:
        """That rollout's records in order, read from the file now."""
        summary = self.rollouts[rollout_id]
        with open(self.path, "rb") as file:
            fd = file.fileno()
            return [
                msgpack.unpackb(os.pread(fd, length, offset), raw=False, strict_map_key=False)
                for offset, length in zip(summary._offsets, summary._lengths)
            ]
