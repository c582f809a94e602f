"""An index of a recording: where each rollout's records are, built in one pass so a
recording far larger than memory opens at once and loads a rollout on demand."""

from __future__ import annotations

import itertools
import os
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgpack

from tracewatch.core.recordings.ending import recorded_ending
from tracewatch.core.recordings.file_format import ROLLOUT_KINDS, Damage
from tracewatch.core.recordings.reader import Scan, read_header
from tracewatch.core.run.times import Attempt, discarded_attempt
from tracewatch.core.session.status import Ending, Status
from tracewatch.core.session.trace_state import (
    ERROR_WORDS_LIMIT,
    ErrorKey,
    RolloutFacts,
    add_error_words,
    count_errors,
    error_key,
    rollout_facts,
)
from tracewatch.core.tokens.flags import COMPACT_STREAMS, NO_FLAGS, node_flags
from tracewatch.core.wire.delta_checks import DeltaValueError, check_scalars
from tracewatch.core.wire.protocol import unpack_record


class _TraceCounts:
    """What a table row needs of one trace (`TraceCounts`), counted from its deltas
    without keeping them: sampled nodes (turns), errors and failed calls, its nodes'
    flags and its latest scalars; its model calls are not read (`call_spans`)."""

    __slots__ = ("turns", "errors", "failed", "has_errors", "error_text", "scalars", "flags")
    call_spans = None
    model_since = None

    def __init__(self) -> None:
        self.turns = 0
        self.errors: list[ErrorKey] = []
        self.failed: list[ErrorKey] = []
        """Its own errors and its failed calls' (`error_key`), for `count_errors`."""
        self.has_errors = False
        """Whether it recorded errors of its own: a failed call that was retried does
        not put a trace in error (`TraceState.has_errors`)."""
        self.error_text = ""
        self.scalars: dict[str, Any] = {}
        self.flags = NO_FLAGS

    def add(self, delta: dict[str, Any]) -> None:
        self.turns += delta.get("sampled", 0)
        errors, failed = delta.get("errors", ()), delta.get("failed_calls", ())
        self.errors += map(error_key, errors)
        self.failed += map(error_key, failed)
        self.has_errors = self.has_errors or bool(errors)
        if (errors or failed) and len(self.error_text) < ERROR_WORDS_LIMIT:
            self.error_text = add_error_words(self.error_text, [*errors, *failed])
        self.flags = self.flags.union(delta.get("flags", NO_FLAGS))
        scalars = delta.get("set")
        if isinstance(scalars, dict) and _usable(scalars):
            self.scalars.update(scalars)

    @property
    def error_count(self) -> int:
        return count_errors(self.errors, self.failed)


def _usable(scalars: dict[str, Any]) -> bool:
    """Whether a recorded `set` is one the live store kept (it rejected the others,
    failing the run): a row computes its phase, tokens and reward from these."""
    try:
        check_scalars(scalars, "set")
    except DeltaValueError:
        return False
    return True


class RolloutSummary:
    """What the index keeps of one rollout: its announcement, counts, outcome, what
    its row shows (`facts`), and where its records are (not the records)."""

    __slots__ = (
        "id",
        "announce",
        "request_ids",
        "deltas",
        "first_t",
        "last_t",
        "started_t",
        "running_t",
        "ended_t",
        "ending",
        "_traces",
        "_attempts",
        "_offsets",
        "_lengths",
    )

    def __init__(self, id: str) -> None:
        self.id = id
        self.announce: dict[str, Any] | None = None
        self.request_ids: list[str] = []
        self.deltas = 0
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.started_t: float | None = None
        """When its (latest) run was requested; `ended_t` when that run replied."""
        self.running_t: float | None = None
        """When that run's first delta came (`Rollout.running_since`)."""
        self.ended_t: float | None = None
        self.ending: Ending | None = None
        """How its (latest) run ended; None while it had not."""
        self._traces: dict[str, _TraceCounts] = {}
        self._attempts: tuple[Attempt, ...] = ()
        """Its (latest) run's attempts discarded and retried (`Rollout.discard`)."""
        self._offsets = array("q")
        self._lengths = array("L")

    @property
    def records(self) -> int:
        return len(self._offsets)

    @property
    def status(self) -> Status:
        """Queued (never requested), running (no reply recorded), or how it ended."""
        if not self.request_ids:
            return Status.QUEUED
        return Status.RUNNING if self.ending is None else self.ending.status

    @property
    def facts(self) -> RolloutFacts:
        """What the store would show once this rollout's records are loaded."""
        return rollout_facts(self._traces, self._attempts)

    def _add(self, offset: int, length: int, record: dict[str, Any]) -> None:
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
            self.request_ids.append(str(record.get("request_id")))
            self._traces, self._attempts = {}, ()  # a fresh run: the store starts a fresh assembly too
            running = record.get("running_t")
            self.started_t, self.running_t, self.ended_t, self.ending = t, running if type(running) in (int, float) else None, None, None
        elif kind == "delta":
            self.deltas += 1
            if self.running_t is None and isinstance(t, (int, float)):
                self.running_t = t
            delta = record.get("d")
            if not isinstance(delta, dict):  # a delta the run failed on: nothing to count
                return
            trace = str(delta.get("trace"))
            if delta.get("discard"):
                primary = next(iter(self._traces), None)
                dropped = self._traces.pop(trace, None)
                if dropped is not None and trace == primary and (attempt := discarded_attempt(dropped.scalars.get("timing"))) is not None:
                    self._attempts = (*self._attempts, attempt)
            else:
                self._traces.setdefault(trace, _TraceCounts()).add(delta)
        elif kind == "reply":
            self.ended_t = t
            self.ending = recorded_ending(record)


def _read_for_index(unpacker: msgpack.Unpacker) -> dict[str, Any]:
    """A record with only what the index keeps decoded: a delta's `trace`, `discard`
    and `set`, a count of its sampled nodes, its errors' and failed calls' words, and
    its nodes' flags; the messages and calls, and token arrays no flag reads, are
    skipped undecoded."""
    record = {}
    for _ in range(unpacker.read_map_header()):
        key = unpacker.unpack()
        if key != "d":
            record[key] = unpacker.unpack()
            continue
        try:
            fields = unpacker.read_map_header()
        except ValueError:  # a delta that is not a map (the run failed on it): kept whole
            record[key] = unpacker.unpack()
            continue
        delta: dict[str, Any] = {}
        record[key] = delta
        for _ in range(fields):
            field = unpacker.unpack()
            if field in ("trace", "set", "discard"):
                delta[field] = unpacker.unpack()
            elif field == "nodes":
                delta["sampled"], delta["flags"] = _nodes(unpacker)
            elif field == "calls":
                delta["failed_calls"] = _failed_calls(unpacker)
            elif field == "errors":
                delta["errors"] = _errors(unpacker)
            else:
                unpacker.skip()
    return record


_FLAGGED_FIELDS = frozenset({"sampled", "mask", "token_ids", *COMPACT_STREAMS})
"""What `node_flags` reads of a node, beside its message's role."""


def _nodes(unpacker: msgpack.Unpacker) -> tuple[int, frozenset[str]]:
    """How many of the nodes under the read position were sampled, and their flags
    (`node_flags`, on the fields it reads); a value that is not a list of maps (the
    store rejects it) counts nothing."""
    try:
        items = unpacker.read_array_header()
    except ValueError:  # not a list: nothing consumed yet
        unpacker.skip()
        return 0, NO_FLAGS
    sampled = 0
    flags = NO_FLAGS
    for _ in range(items):
        try:
            fields = unpacker.read_map_header()
        except ValueError:
            unpacker.skip()
            continue
        node: dict[str, Any] = {}
        for _ in range(fields):
            key = unpacker.unpack()
            if isinstance(key, str) and key in _FLAGGED_FIELDS:
                node[key] = unpacker.unpack()
            elif key == "message":
                node[key] = {"role": (_fields(unpacker, ("role",)) or {}).get("role")}
            else:
                unpacker.skip()
        sampled += bool(node.get("sampled"))
        if found := node_flags(node):
            flags = flags | found
    return sampled, flags


def _fields(unpacker: msgpack.Unpacker, wanted: tuple[str, ...]) -> dict[str, Any] | None:
    """The map under the read position with only its `wanted` fields decoded, the rest
    skipped undecoded; None (the value skipped) if it is not a map."""
    try:
        fields = unpacker.read_map_header()
    except ValueError:
        unpacker.skip()
        return None
    found = {}
    for _ in range(fields):
        key = unpacker.unpack()
        if key in wanted:
            found[key] = unpacker.unpack()
        else:
            unpacker.skip()
    return found


def _errors(unpacker: msgpack.Unpacker) -> list[object]:
    """The errors of the list under the read position, one item each, with only their
    `type` and `message` decoded (a traceback is skipped); [] if it is not a list."""
    try:
        items = unpacker.read_array_header()
    except ValueError:  # not a list: nothing consumed yet
        unpacker.skip()
        return []
    return [_fields(unpacker, ("type", "message")) for _ in range(items)]


def _failed_calls(unpacker: msgpack.Unpacker) -> list[object]:
    """The errors of the calls under the read position that sampled no node (`node`
    None), one item per such call; [] if it is not a list of maps."""
    try:
        items = unpacker.read_array_header()
    except ValueError:  # not a list: nothing consumed yet
        unpacker.skip()
        return []
    failed: list[object] = []
    for _ in range(items):
        try:
            fields = unpacker.read_map_header()
        except ValueError:
            unpacker.skip()
            continue
        node, error = 0, None
        for _ in range(fields):
            key = unpacker.unpack()
            if key == "node":
                node = unpacker.unpack()
            elif key == "error":
                error = _fields(unpacker, ("type", "message"))
            else:
                unpacker.skip()
        if node is None:
            failed.append(error)
    return failed


class RecordingIndex:
    """Where each rollout's records are in a recording, read in one pass that can stop
    and go on (`read_on`), so a recording far larger than memory shows its first rows
    at once and loads a rollout on demand. Per record it keeps an offset and a length
    (12 bytes)."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self.header = header
        self.rollouts: dict[str, RolloutSummary] = {}
        """By rollout id, in the order they were announced."""
        self.events: list[dict[str, Any]] = []
        self.records = 0
        self.damage = Damage()
        self.done = True
        """Whether the pass has reached the end of the file."""
        self.read_to = 0
        """The byte the pass has read up to; `size` the file's when it began."""
        self.size = 0
        self._read_note: str | None = None
        self._scan: Scan | None = None
        self._reading: Iterator[tuple[int, int, Any]] = iter(())

    @property
    def truncated(self) -> str | None:
        """Where a cut or damaged file stopped, and what was skipped, if anything."""
        return self.damage.note(self._read_note, self.path)

    @property
    def fraction(self) -> float:
        """How much of the file the pass has read, 0 to 1 (1 once done)."""
        return 1.0 if self.done else min(self.read_to / self.size, 0.99) if self.size else 0.0

    @classmethod
    def begin(cls, path: str | os.PathLike[str]) -> RecordingIndex:
        """The index with its header read and no record yet: `read_on` reads them."""
        path = Path(path)
        header = read_header(path)
        index = cls(path, header.fields)
        index._read_note = header.cut
        if header.cut is None:
            index.done = False
            index.read_to, index.size = header.start, path.stat().st_size
            index._scan = Scan(path, header.start, _read_for_index, header.damage)
            index._reading = iter(index._scan)
        return index

    @classmethod
    def build(cls, path: str | os.PathLike[str]) -> RecordingIndex:
        """The whole file indexed before it returns."""
        index = cls.begin(path)
        index.read_on()
        return index

    def read_on(self, records: int | None = None) -> dict[str, None]:
        """Index up to `records` more records (all that are left without a limit); the
        ids of the rollouts they belong to, in the order they were announced."""
        touched: dict[str, None] = {}
        rollouts = self.rollouts
        read = 0
        for offset, length, record in itertools.islice(self._reading, records):
            read += 1
            self.read_to = offset + length
            kind, rollout_id = record.get("k"), record.get("id")
            if self.damage.check(record, f"byte {offset}", announced=rollouts):
                continue
            if kind == "rollout":
                rollouts[rollout_id] = RolloutSummary(rollout_id)
            if kind in ROLLOUT_KINDS:
                rollouts[rollout_id]._add(offset, length, record)
                touched[rollout_id] = None
            elif kind == "event":
                self.events.append(record)
        if self._scan is None:
            return touched
        self.records = self._scan.count
        if records is None or read < records:  # the end of the file
            self._read_note, self.done = self._scan.note, True
            self._scan, self._reading = None, iter(())
        return touched

    def load(self, rollout_id: str, first: int = 0) -> list[dict[str, Any]]:
        """That rollout's records in order, from its `first`, read from the file now
        (see `read_records`)."""
        summary = self.rollouts[rollout_id]
        return read_records(self.path, summary._offsets[first:], summary._lengths[first:], self.damage)


def read_records(path: Path, offsets: Iterable[int], lengths: Iterable[int], damage: Damage) -> list[dict[str, Any]]:
    """The records at those offsets and lengths, in order, read from the file now; one
    that cannot be decoded whole (nested deeper than msgpack reads, damaged, or cut
    off) is left out and counted in `damage`. OSError if the file cannot be read."""
    records = []
    with open(path, "rb") as file:
        fd = file.fileno()
        for offset, length in zip(offsets, lengths):
            try:
                records.append(unpack_record(os.pread(fd, length, offset)))
            except (ValueError, TypeError, msgpack.UnpackException) as error:
                damage.count(f"{error!r} (at byte {offset})")
    return records
