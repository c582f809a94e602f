"""Finished episodes: `traces/stream.index.jsonl` read as it grows into columns.

prime-rl's monitor writes one compact row per episode as it lands (`index_row`:
reward, tokens, turns, where its record is, ...). `EpisodeIndex.read_on` parses the
rows written since the last call, a bounded number of bytes at a time, into an
`EpisodeTable`: one numpy array per field, so a million rows fit in little memory and a
filter or a sort over them is one numpy expression. A row is a position in
every column, in the order the rows were written.

The index has no step and no task. The table has columns for them, filled by whoever
learns them (`PrimeRlRun` does): `dispatch_step` and `task` from the dispatch identity
of the trace's live file when it was seen streaming, or from the record once it is read
(`info.dispatch.step` / `run.work.step`, `task.data.name`); `ship_step`, `effective`
and the trace's `advantage` from the orchestrator's annotations (`info.ship.step`,
for the episodes a training step or an eval epoch shipped). `steps()` combines them.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tracewatch.core.recordings.prime_rl.columns import (
    MISSING,
    Growable,
    Ids,
    Interned,
    flags,
    floats,
    integers,
)
from tracewatch.core.recordings.prime_rl.files import LineTail
from tracewatch.core.recordings.prime_rl.notes import Notes
from tracewatch.core.text import short_repr

MAX_INDEX_LINE = 1 << 20
"""An index row is a few hundred bytes; a longer line is skipped and counted."""
READ_BYTES = 256 << 10
"""What one `read_on` parses by default. Larger pieces read no faster and leave the
heap fragmented by their temporaries (each piece's garbage interleaved with what the
table keeps), so a row costs more memory (docs/performance.md)."""

FLOAT_FIELDS = ("reward", "advantage", "cost", "dispatch", "arrival", "duration")
"""Float64, NaN where the row had none. `dispatch` and `arrival` are epoch seconds."""
WIDE_FIELDS = ("offset",)
"""Int64, `MISSING` where the row had none: the record's byte offset in its chunk's
uncompressed content."""
NARROW_FIELDS = ("line", "input_tokens", "output_tokens", "turns", "branches", "num_errors", "chunk")
"""Int32 (a count past 2**31 reads as `MISSING`, unknown, never as another number).
`line` is the 1-based ordinal prime-rl gave the episode (it carries on across
relaunches). A row without `chunk` (a single-file stream) reads as chunk 0."""
FLAG_FIELDS = ("ok", "truncated")
"""Int8: 1, 0, or `MISSING`."""
TEXT_FIELDS = ("kind", "env", "group", "stop_condition")
"""Interned: a code per row into the field's labels (`labels`)."""
FILLED_STEP_FIELDS = ("dispatch_step", "ship_step")
"""Int32, `MISSING` until learnt (see the module's docstring)."""

STEP_UNKNOWN, STEP_FROM_DISPATCH, STEP_FROM_SHIP = 0, 1, 2


class EpisodeTable:
    """The finished episodes as columns. `column(name)` is a numpy view of the filled
    rows (don't keep it across appends); `labels(name)` decodes an interned column."""

    def __init__(self) -> None:
        self._numbers: dict[str, Growable] = {
            **{name: Growable(np.float64) for name in FLOAT_FIELDS},
            **{name: Growable(np.int64) for name in WIDE_FIELDS},
            **{name: Growable(np.int32) for name in (*NARROW_FIELDS, *FILLED_STEP_FIELDS)},
            **{name: Growable(np.int8) for name in (*FLAG_FIELDS, "effective")},
        }
        self._texts: dict[str, Interned] = {
            "kind": Interned(np.int8),
            "env": Interned(np.int32),
            "group": Interned(np.int32),
            "stop_condition": Interned(np.int16),
            "task": Interned(np.int32),
        }
        self.ids = Ids()
        """Each row's episode id."""
        self.trace_ids = Ids()
        """Every row's trace ids, one after another: row r's are `trace_start[r]` up to
        `trace_start[r + 1]` (or the end)."""
        self._trace_start = Growable(np.int32)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def column(self, name: str) -> np.ndarray[Any, Any]:
        """A numeric column, or an interned one's codes (`MISSING`: none)."""
        if name in self._texts:
            return self._texts[name].codes.values
        return self._numbers[name].values

    def labels(self, name: str) -> list[str]:
        """An interned column's texts, by code."""
        return self._texts[name].labels

    def code(self, name: str, label: str) -> int:
        """`label`'s code in an interned column (`MISSING` if no row has it): compare
        `column(name) == code` to filter."""
        return self._texts[name].find(label)

    def text(self, name: str, row: int) -> str | None:
        return self._texts[name].label(row)

    def episode_id(self, row: int) -> str | None:
        return self.ids.get(row)

    @property
    def trace_start(self) -> np.ndarray[Any, Any]:
        """Per row, the position of its first trace id in `trace_ids`."""
        return self._trace_start.values

    def traces_of(self, row: int) -> list[str]:
        starts = self._trace_start.values
        stop = int(starts[row + 1]) if row + 1 < self.size else len(self.trace_ids)
        return [text for text in self.trace_ids.many(int(starts[row]), stop) if text is not None]

    def row_of_trace_position(self, positions: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The rows owning positions of `trace_ids`."""
        return np.searchsorted(self._trace_start.values, positions, "right") - 1

    def find_traces(self, trace_ids: list[str]) -> list[int]:
        """The row of each trace id (`MISSING`: no finished episode has it yet)."""
        positions = np.array(self.trace_ids.find_many(trace_ids), dtype=np.int64)
        rows = self.row_of_trace_position(np.maximum(positions, 0))
        found: list[int] = np.where(positions >= 0, rows, MISSING).tolist()
        return found

    def steps(self, rows: np.ndarray[Any, Any] | None = None) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """(step per row (of `rows`, if given), where it came from: `STEP_FROM_DISPATCH`,
        `STEP_FROM_SHIP` or `STEP_UNKNOWN`). The dispatch step (the orchestrator's step
        when the episode was scheduled; for eval, the eval step) wins over the step it
        shipped at."""
        dispatched, shipped = self.column("dispatch_step"), self.column("ship_step")
        if rows is not None:
            dispatched, shipped = dispatched[rows], shipped[rows]
        step = np.where(dispatched >= 0, dispatched, shipped)
        source = np.where(dispatched >= 0, STEP_FROM_DISPATCH, np.where(shipped >= 0, STEP_FROM_SHIP, STEP_UNKNOWN))
        return step, source.astype(np.int8)

    def row(self, row: int) -> dict[str, Any]:
        """One row as a map of every field (NaN and `MISSING` as None)."""
        found: dict[str, Any] = {"row": row, "id": self.episode_id(row), "trace_ids": self.traces_of(row)}
        for name, column in self._numbers.items():
            value = column.values[row].item()
            found[name] = None if value != value or (name not in FLOAT_FIELDS and value == MISSING) else value
        for name in (*FLAG_FIELDS, "effective"):
            found[name] = None if found[name] is None else bool(found[name])
        found.update({name: self.text(name, row) for name in self._texts})
        return found

    def task_code(self, task: str) -> int:
        """`task`'s code in the Task column, added if no row has it yet."""
        return self._texts["task"].code(task)

    def set_task(self, row: int, task: str) -> None:
        self._texts["task"].set(row, task)

    def append(self, rows: list[dict[str, Any]]) -> None:
        """Rows as parsed from the index (maps; anything else was dropped before)."""
        if not rows:
            return
        values = _by_field(rows)
        for name in FLOAT_FIELDS:
            self._numbers[name].extend(floats(values[name]))
        for name in WIDE_FIELDS:
            self._numbers[name].extend(integers(values[name]))
        for name in NARROW_FIELDS:
            self._numbers[name].extend(integers(values[name], np.int32))
        for name in FLAG_FIELDS:
            self._numbers[name].extend(flags(values[name]))
        unknown = np.full(len(rows), MISSING)
        for name in FILLED_STEP_FIELDS:
            self._numbers[name].extend(unknown.astype(np.int32))
        self._numbers["effective"].extend(unknown.astype(np.int8))
        for name in TEXT_FIELDS:
            self._texts[name].extend(values[name])
        self._texts["task"].codes.extend(unknown.astype(np.int32))
        self.ids.extend(values["id"])
        per_row: list[list[Any]] = [ids if type(ids) is list else [] for ids in values["trace_ids"]]
        counts = np.fromiter(map(len, per_row), dtype=np.int64, count=len(per_row))
        self._trace_start.extend(len(self.trace_ids) + np.cumsum(counts) - counts)
        self.trace_ids.extend([trace_id for ids in per_row for trace_id in ids])
        self.size += len(rows)

    @property
    def nbytes(self) -> int:
        """The columns' bytes (the labels of interned columns not counted)."""
        return (
            sum(column.nbytes for column in self._numbers.values())
            + sum(text.codes.nbytes for text in self._texts.values())
            + self.ids.nbytes
            + self.trace_ids.nbytes
            + self._trace_start.nbytes
        )


_FIELDS = (*FLOAT_FIELDS, *WIDE_FIELDS, *NARROW_FIELDS, *FLAG_FIELDS, *TEXT_FIELDS, "id", "trace_ids")
_ALL_FIELDS = operator.itemgetter(*_FIELDS)


def _by_field(rows: list[dict[str, Any]]) -> dict[str, Sequence[Any]]:
    """Each field's values over `rows`: one C call per row when every row has every
    field (prime-rl writes them all), a lookup per field and row otherwise (a missing
    `chunk` is chunk 0: a single-file stream)."""
    try:
        return dict(zip(_FIELDS, zip(*map(_ALL_FIELDS, rows))))
    except KeyError:
        return {name: [row.get(name, 0 if name == "chunk" else None) for row in rows] for name in _FIELDS}


class EpisodeIndex:
    """`stream.index.jsonl` followed: `read_on` adds the rows written since."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.table = EpisodeTable()
        self._tail = LineTail(path, MAX_INDEX_LINE)
        self.skipped = Notes()
        """Lines that are not index rows (garbage, a row torn by a crash and glued to the
        next), each skipped, never a stop: the rows after it are read."""
        self.generation = 0
        """Bumped when the index shrank or was replaced (a new run in the same folder):
        the table is then a new one, read from the new file's start."""

    @property
    def caught_up(self) -> bool:
        """The last `read_on` reached the end of what is written."""
        return self._tail.caught_up

    def read_on(self, max_bytes: int = READ_BYTES) -> range:
        """Parse the rows written since the last call, about `max_bytes` of them; the
        rows added."""
        got = self._tail.read(max_bytes)
        if got.restarted:
            self.table, self.generation = EpisodeTable(), self.generation + 1
            self.skipped.add(f"{self.path} shrank or was replaced: read again from its start")
        start = len(self.table)
        if got.problem:
            self.skipped.add(got.problem)
        try:
            rows = list(map(orjson.loads, got.lines))
        except orjson.JSONDecodeError:
            rows = self._parse_each(got.lines)
        if not all(type(row) is dict for row in rows):
            for row in rows:
                if type(row) is not dict:
                    self.skipped.add(f"{self.path.name}: a line is not an index row: {short_repr(row)}")
            rows = [row for row in rows if type(row) is dict]
        self.table.append(rows)
        return range(start, len(self.table))

    def _parse_each(self, lines: list[bytes]) -> list[Any]:
        """The lines that parse; each that does not is counted (its text may be a row
        torn by a crash and glued to the next: the rows after it are read)."""
        parsed = []
        first = self._tail.lines_read - len(lines)
        for number, line in enumerate(lines, first + 1):
            try:
                parsed.append(orjson.loads(line))
            except orjson.JSONDecodeError as error:
                self.skipped.add(f"{self.path.name}, a line near line {number}: not JSON ({error})")
        return parsed
