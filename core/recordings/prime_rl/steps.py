"""The dispatch step and task of finished episodes, from their records.

The index has neither. A row learns them from its trace's live file when that was seen
(`PrimeRlRun` fills them on landing), or from its record: `info.dispatch.step` (stamped
on arrival), else `run.work.step`; the task's name, else `idx=N`, as prime-rl's
dispatch names it. `StepScan.fill` reads the records of rows that still lack a step, a
bounded number a call, newest first, each chunk opened once and read forward in offset
order (a sealed chunk's frames decompressed once each): what per-step eval progress needs
for eval episodes that landed before the run was followed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tracewatch.core.recordings.prime_rl.chunks import OpenChunk, RecordUnreadable
from tracewatch.core.recordings.prime_rl.episodes import EpisodeTable

INT32 = 1 << 31


def record_step(record: dict[str, Any]) -> int | None:
    """The step an episode was dispatched at, from its record: its first trace's
    `info.dispatch.step`, else `run.work.step`. A negative step is none: the table
    keeps a row's step unknown as a negative one, so taking it would leave the row
    lacking a step and its record read again by every scan."""
    traces = record.get("traces")
    first = traces[0] if type(traces) is list and traces and type(traces[0]) is dict else {}
    info = first.get("info")
    dispatch = info.get("dispatch") if type(info) is dict else None
    step = _step(dispatch.get("step")) if type(dispatch) is dict else None
    if step is None:
        run = record.get("run")
        work = run.get("work") if type(run) is dict else None
        step = _step(work.get("step")) if type(work) is dict else None
    return step


def _step(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value < INT32 else None


def record_task(record: dict[str, Any]) -> str | None:
    """The task as prime-rl's dispatch names it: `task.data.name`, else `idx=N`."""
    task = record.get("task")
    data = task.get("data") if type(task) is dict else None
    if type(data) is not dict:
        return None
    name = data.get("name")
    if name is not None:
        return str(name)
    return f"idx={data.get('idx')}" if "idx" in data else None


def fill_from_record(table: EpisodeTable, row: int, record: dict[str, Any]) -> tuple[int | None, str | None]:
    """Give `row` the step and task its record holds, where it has none; them."""
    step, task = record_step(record), record_task(record)
    if step is not None and table.column("dispatch_step")[row] < 0:
        table.column("dispatch_step")[row] = step
    if task is not None and table.text("task", row) is None:
        table.set_task(row, task)
    return step, task


class StepScan:
    """Rows without a dispatch step, their records read a few at a time (`fill`)."""

    def __init__(self, stream: Path) -> None:
        self.stream = stream
        self.unreadable: set[int] = set()
        """Rows whose record could not be read (or holds no step): not tried again."""
        self.problems: list[str] = []
        self.learnt: list[int] = []
        """The rows the last `fill` read a step or a task for (a record can name the task alone)."""

    def fill(self, table: EpisodeTable, max_rows: int = 256, kind: str | None = "eval") -> int:
        """Read the records of up to `max_rows` of the newest rows (of `kind`, or any)
        that lack a step; the rows that got one."""
        wanted = table.column("dispatch_step") < 0
        if kind is not None:
            wanted &= table.column("kind") == table.code("kind", kind)
        rows = np.flatnonzero(wanted)
        if self.unreadable:
            rows = rows[~np.isin(rows, np.fromiter(self.unreadable, dtype=np.int64))]
        rows = rows[-max_rows:]
        chunks, offsets = table.column("chunk")[rows], table.column("offset")[rows]
        filled, self.learnt = 0, []
        for chunk in np.unique(chunks).tolist():
            mine = rows[chunks == chunk]
            mine = mine[np.argsort(offsets[chunks == chunk], kind="stable")]
            filled += self._fill_chunk(table, chunk, mine.tolist())
        return filled

    def _fill_chunk(self, table: EpisodeTable, chunk: int, rows: list[int]) -> int:
        try:
            opened = OpenChunk(self.stream, chunk)
        except RecordUnreadable as error:
            self._give_up(rows, str(error))
            return 0
        filled = 0
        with opened:
            for row in rows:
                try:
                    record = opened.record_at(int(table.column("offset")[row]))
                except RecordUnreadable as error:
                    self._give_up([row], str(error))
                    continue
                step, task = fill_from_record(table, row, record)
                if step is not None or task is not None:
                    self.learnt.append(row)
                if step is None:
                    self._give_up([row], f"row {row}'s record holds no step")
                else:
                    filled += 1
        return filled

    def _give_up(self, rows: list[int], why: str) -> None:
        self.unreadable.update(rows)
        if len(self.problems) < 20:
            self.problems.append(why)
