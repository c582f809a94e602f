"""Every rollouts-table column, once: the table's layout, its cells, sorting and which
columns tick with the clock are all read from `COLUMNS`, so a column is one record here,
not a header in one place and a cell or a sort in another. The filter's fields and the
numbers it compares are core's (`rollout_filter`), each named for the column showing it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.style import Style

from tracewatch.core.run.durations import clock
from tracewatch.core.session.contracts import FinishedRows
from tracewatch.core.session.phases import ROLLOUT_PHASES
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import StallTest
from tracewatch.core.tokens.flags import FLAGS
from tracewatch.tui.drawing.literal import safe
from tracewatch.tui.drawing.numbers import reward_text
from tracewatch.tui.drawing.palette import Palette

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

Cell = tuple[str, Style]
"""A cell's text (before it is fitted to the column) and its style."""
CellOf = Callable[[Rollout, float, Palette, StallTest], Cell]
"""A rollout's cell at `now`, in a palette, told whether a rollout is stalled (`StoreView.is_stalled`)."""

PLAIN = Style()


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    width: int
    """Cells of text, padding left out."""
    priority: int
    """Its rank when a narrow table cannot show every column: 1 is kept first. The
    columns that tell one row from another (variant, task, #) come first: rows that
    read alike cannot be told apart whatever else they show."""
    sort: Callable[[Rollout, float], SupportsRichComparison]
    """What `o` and a header click sort rows by, given the rollout and `now`."""
    cell: CellOf
    ticks: bool = False
    """Its cell moves with the clock while the rollout runs: a table sorted by it
    sorts again each second."""
    stepped: bool = False
    """Shown only in a session where some rollout has a training step (a training
    run's files): elsewhere it would be an empty column."""


def rollout_number(rollout: Rollout) -> str:
    """Which of its task's rollouts this is (1-based), after its run when the variant
    was started again: `2:1` is the second run's first; two rows of one task differ."""
    number = str(rollout.rollout_index + 1)
    return number if rollout.run == 1 else f"{rollout.run}:{number}"


def _trace(rollout: Rollout, now: float, palette: Palette, stalled: StallTest) -> Cell:
    ids = rollout.trace_ids
    # "+N" more traces must fit the column: a shorter id makes room for it
    text = (ids[0][:8] if len(ids) == 1 else f"{ids[0][:6]} +{len(ids) - 1}") if ids else ""
    return safe(text), palette.muted


def _activity(rollout: Rollout, now: float, palette: Palette, stalled: StallTest) -> Cell:
    label, seconds = rollout.activity(now)
    if rollout.status.finished or rollout.status is Status.QUEUED:
        return label, palette.muted
    if stalled(rollout, now):
        # the duration first: a narrow column cuts the label, never the time
        return f"⚠ {clock(seconds)} {label}", palette.warning + Style(reverse=True)
    return f"{label} {clock(seconds)}", palette.phase("agent") if label == "generating" else PLAIN


def _errors(rollout: Rollout, now: float, palette: Palette, stalled: StallTest) -> Cell:
    errors = rollout.errors
    return (str(errors), palette.error) if errors else ("", PLAIN)


FLAG_MARKS = {"tool-trained": "tool", "misaligned": "align"}
"""How the Flags column writes each flag (`tracewatch.core.tokens.flags`), short enough that two fit."""


def _flags(rollout: Rollout, now: float, palette: Palette, stalled: StallTest) -> Cell:
    flags = rollout.flags
    return (" ".join(FLAG_MARKS[flag] for flag in FLAGS if flag in flags), palette.warning) if flags else ("", PLAIN)


_PHASE_ORDER = {phase: i for i, phase in enumerate(ROLLOUT_PHASES)}

COLUMNS: tuple[Column, ...] = (
    Column(
        "variant", "Variant", 10, 1,
        sort=lambda r, now: r.variant,
        cell=lambda r, now, palette, stall: (safe(r.variant), PLAIN),
    ),
    Column(
        "task", "Task", 24, 2,
        sort=lambda r, now: r.task_label.lower(),
        cell=lambda r, now, palette, stall: (safe(r.task_label), PLAIN),
    ),
    Column(
        "number", "#", 4, 3,
        sort=lambda r, now: (r.run, r.rollout_index),
        cell=lambda r, now, palette, stall: (rollout_number(r), palette.muted),
    ),
    Column(
        "step", "Step", 5, 4,
        sort=lambda r, now: (r.step is not None, r.step or 0),
        cell=lambda r, now, palette, stall: ("" if r.step is None else str(r.step), PLAIN),
        stepped=True,
    ),
    Column(
        "phase", "Phase", 10, 4,
        sort=lambda r, now: _PHASE_ORDER.get(r.phase, len(_PHASE_ORDER)),
        cell=lambda r, now, palette, stall: (r.phase, palette.phase(r.phase)),
    ),
    Column("activity", "Activity", 16, 6, sort=lambda r, now: r.activity(now)[1], cell=_activity, ticks=True),
    Column(
        "turns", "Turns", 5, 10,
        sort=lambda r, now: r.turns,
        cell=lambda r, now, palette, stall: (str(r.turns), PLAIN),
    ),
    Column(
        "tokens", "Tokens", 7, 11,
        sort=lambda r, now: (r.tokens is not None, r.tokens or 0),
        cell=lambda r, now, palette, stall: ("-" if r.tokens is None else f"{r.tokens:,}", PLAIN),
    ),
    Column(
        "reward", "Reward", 6, 5,
        sort=lambda r, now: (r.reward is not None, r.reward or 0.0),
        cell=lambda r, now, palette, stall: (reward_text(r.reward), PLAIN),
    ),
    Column(
        "elapsed", "Elapsed", 7, 7,
        sort=lambda r, now: r.elapsed(now),
        cell=lambda r, now, palette, stall: (clock(r.elapsed(now)) if r.started_at and not r.waiting else "", PLAIN),
        ticks=True,
    ),
    Column("errors", "Errors", 6, 8, sort=lambda r, now: r.errors, cell=_errors),
    Column("flag", "Flags", 10, 9, sort=lambda r, now: len(r.flags), cell=_flags),
    Column("trace", "Trace", 9, 12, sort=lambda r, now: next(iter(r.trace_ids), ""), cell=_trace),
    Column(
        "used", "Used", 4, 8,
        sort=lambda r, now: (r.used is not None, r.used or False),
        cell=lambda r, now, palette, stall: ("" if r.used is None else "yes" if r.used else "no", PLAIN),
        stepped=True,
    ),
)
"""Left to right: what a glance needs first (what runs, where it is, what it does now)
on the left, so an 80-column terminal shows it without scrolling; the trace id, a
cross-reference, last. By priority a narrow table keeps what runs, where it is, what it
does now, how it ended, how long, whether it failed (and, in a training run, whether
the trainer used it), whether its training tokens are wrong; the cross-references
last."""

BY_KEY = {column.key: column for column in COLUMNS}

FinishedCell = Callable[[FinishedRows, int, Palette], Cell]
"""A finished row's cell drawn from the columns (`StoreView.finished_rows`): what the
column's `cell` draws of the rollout the row would be."""


def _finished_task(rows: FinishedRows, row: int) -> str:
    code = int(rows.column("task")[row])
    return rows.labels("task")[code] if code >= 0 else f"task {int(rows.column('task_index')[row])}"


def _finished_trace(rows: FinishedRows, row: int, palette: Palette) -> Cell:
    ids = rows.trace_ids(row)
    text = (ids[0][:8] if len(ids) == 1 else f"{ids[0][:6]} +{len(ids) - 1}") if ids else ""
    return safe(text), palette.muted


def _finished_number(rows: FinishedRows, row: int, name: str, absent: int = -1) -> int | None:
    value = int(rows.column(name)[row])
    return None if value <= absent else value


def _ok(rows: FinishedRows, row: int) -> bool:
    return int(rows.column("ok")[row]) != 0


def _finished_float(rows: FinishedRows, row: int, name: str) -> float | None:
    value = float(rows.column(name)[row])
    return None if value != value else value


FINISHED_CELLS: dict[str, FinishedCell] = {
    "variant": lambda rows, row, palette: (safe(rows.labels("variant")[int(rows.column("variant")[row])]), PLAIN),
    "task": lambda rows, row, palette: (safe(_finished_task(rows, row)), PLAIN),
    "number": lambda rows, row, palette: (str(int(rows.column("number")[row]) + 1), palette.muted),
    "step": lambda rows, row, palette: ("" if (step := _finished_number(rows, row, "step")) is None else str(step), PLAIN),
    "phase": lambda rows, row, palette: ("done", palette.phase("done")) if _ok(rows, row) else ("error", palette.phase("error")),
    "activity": lambda rows, row, palette: (Status.DONE.value if _ok(rows, row) else Status.FAILED.value, palette.muted),
    "turns": lambda rows, row, palette: (str(max(0, int(rows.column("turns")[row]))), PLAIN),
    "tokens": lambda rows, row, palette: ("-" if (tokens := _finished_number(rows, row, "tokens")) is None else f"{tokens:,}", PLAIN),
    "reward": lambda rows, row, palette: (reward_text(_finished_float(rows, row, "reward")), PLAIN),
    "elapsed": lambda rows, row, palette: ("" if (seconds := _finished_float(rows, row, "elapsed")) is None else clock(max(0.0, seconds)), PLAIN),
    "errors": lambda rows, row, palette: (str(errors), palette.error) if (errors := int(rows.column("errors")[row])) > 0 else ("", PLAIN),
    "flag": lambda rows, row, palette: ("", PLAIN),
    "trace": _finished_trace,
    "used": lambda rows, row, palette: ("" if (used := _finished_number(rows, row, "used")) is None else "yes" if used else "no", PLAIN),
}
"""Each column's cell of a finished row (the keys of `BY_KEY`)."""
