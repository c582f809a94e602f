"""The finished rows a session keeps as columns (`FinishedRows`) read the way its
rollouts are: a card's counts, the table's filter and its sort order, each a few numpy
passes over the columns, never a Python object a row. Each says of a finished row what
the per-rollout code says of the rollout the row would be: a row ended `done` when its
episode was ok, else `failed` (its phase `error`), its reason says how many errors it
had, it has no flags, nothing of it ticks with the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tracewatch.core.session.compare import Cell, TaskCell
from tracewatch.core.session.contracts import FinishedRows
from tracewatch.core.session.phases import ROLLOUT_PHASES
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.rollout_filter import OPERATORS, Comparison, RowFilter
from tracewatch.core.session.status import Status
from tracewatch.core.session.tallies import Tally
from tracewatch.core.session.task_identity import task_identity
from tracewatch.core.session.task_ranks import TaskRanks

Mask = npt.NDArray[np.bool_]
NONE_LAST = -np.inf
"""A value a row lacks sorts first, as the per-rollout sort puts None before any value."""


def failed_reason(errors: int) -> str:
    """Why a finished row that was not ok failed, as its rollout says it."""
    return f"the episode ended with {errors} error(s)" if errors > 0 else "the episode is not ok"


_kept: dict[str, tuple[object, Any]] = {}
"""The last task texts, ranks and lowered labels made (`task_texts`, `sort_keys`,
`_labels_holding`), with what they were made of (the label lists themselves, not their
ids, which a new table's list can reuse): a keystroke over a million rows does not make
them again."""


def _keep(name: str, stamp: object, make: Callable[[], Any]) -> Any:
    found = _kept.get(name)
    made = make() if found is None or found[0] != stamp else found[1]
    _kept[name] = (stamp, made)  # the newest lists: the next look compares them by identity, not item by item
    return made


def task_codes(rows: FinishedRows, subset: npt.NDArray[np.int64] | None = None) -> tuple[npt.NDArray[np.int64], Sequence[str], int]:
    """Each row's (of `subset`'s) task as a code: a known task's name's, else
    `len(named) + N` for `task N` (its index among its variant's tasks); the names and
    how many numbered tasks there are (every N up to the largest)."""
    named = rows.labels("task")
    task_index = rows.column("task_index")
    numbers = int(task_index.max()) + 1 if len(task_index) else 0
    picked = Picked(rows, subset)
    codes = picked.column("task").astype(np.int64)
    return np.where(codes >= 0, codes, len(named) + picked.pick(task_index)), named, numbers


def task_texts(rows: FinishedRows, subset: npt.NDArray[np.int64] | None = None) -> tuple[npt.NDArray[np.int64], list[str]]:
    """`task_codes` with the texts they index: the names, then `task 0` .. (the texts
    change only when a task is new)."""
    codes, named, numbers = task_codes(rows, subset)
    labels: list[str] = _keep("texts", (named, len(named), numbers), lambda: [*named, *(f"task {n}" for n in range(numbers))])
    return codes, labels


def finished_tallies(rows: FinishedRows) -> dict[str, Tally]:
    """Per variant, what its finished rows without a rollout add to its card."""
    alone = ~rows.has_rollout()
    codes = rows.column("variant")[alone]
    ok = rows.column("ok")[alone] != 0
    reward = rows.column("reward")[alone]
    scored = ~np.isnan(reward)
    labels = rows.labels("variant")
    size = len(labels)
    done = np.bincount(codes[ok], minlength=size).tolist()
    failed = np.bincount(codes[~ok], minlength=size).tolist()
    count = np.bincount(codes[scored], minlength=size).tolist()
    sums = np.bincount(codes[scored], weights=reward[scored], minlength=size).tolist()
    found: dict[str, Tally] = {}
    for code, name in enumerate(labels):
        tally = found[name] = Tally(dict.fromkeys(Status, 0))
        tally.counts[Status.DONE], tally.counts[Status.FAILED] = done[code], failed[code]
        tally.reward_sum, tally.scored = sums[code], count[code]
    return found


def _per_label(labels: Sequence[str], codes: npt.NDArray[Any], test: Callable[[str], bool]) -> Mask:
    """`test` weighed once a label, spread over the rows by their codes (-1: no label)."""
    verdicts = np.array([test(label) for label in labels] + [False], dtype=bool)
    found: Mask = verdicts[codes]
    return found


def _holds(comparison: Comparison, values: npt.NDArray[Any], known: Mask) -> Mask:
    found = np.zeros(len(values), dtype=bool)
    for op, number in comparison.alternatives:
        found |= OPERATORS[op](values, number)
    return found & known


class Picked:
    """The columns of every row, or of some (`subset`)."""

    def __init__(self, rows: FinishedRows, subset: npt.NDArray[np.int64] | None) -> None:
        self.rows, self.subset = rows, subset
        self.count = rows.count if subset is None else len(subset)

    def column(self, name: str) -> npt.NDArray[Any]:
        return self.pick(self.rows.column(name))

    def pick(self, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return values if self.subset is None else values[self.subset]


def finished_mask(row_filter: RowFilter, rows: FinishedRows, subset: npt.NDArray[np.int64] | None = None) -> Mask:
    """Which finished rows (of `subset`, if given) `row_filter` lets through: what
    its per-rollout test (`RowFilter.matcher`) says of the rollouts the rows stand for."""
    picked = Picked(rows, subset)
    count = picked.count
    mask = np.ones(count, dtype=bool)
    if not row_filter:
        return mask
    ok = picked.column("ok") != 0
    variant = picked.column("variant")
    variant_labels = rows.labels("variant")
    if row_filter.variants:
        mask &= _per_label(variant_labels, variant, lambda name: any(value in name.lower() for value in row_filter.variants))
    if row_filter.statuses:
        done = any(value in Status.DONE.value for value in row_filter.statuses)
        failed = any(value in Status.FAILED.value for value in row_filter.statuses)
        mask &= np.where(ok, done, failed)
    if row_filter.phases:
        mask &= np.where(ok, any(value in "done" for value in row_filter.phases), any(value in "error" for value in row_filter.phases))
    if row_filter.flags:
        mask[:] = False  # a finished row never read has no flags
    for comparison in row_filter.comparisons:
        values, known = _measure(picked, comparison.field)
        mask &= _holds(comparison, values, known)
    if row_filter.errors:
        errors = np.maximum(picked.column("errors"), 0)
        said = np.zeros(count, dtype=bool)
        for number in np.unique(errors[~ok]).tolist():
            reason = failed_reason(number)
            if all(text in reason for text in row_filter.errors):
                said |= ~ok & (errors == number)
        mask &= said
    if row_filter.words:
        codes, labels = task_texts(rows, subset)
        for word in row_filter.words:
            if not mask.any():
                break
            held = _labels_holding("variant", variant_labels, variant, word) | _labels_holding("task", labels, codes, word)
            mask &= held | rows.containing(word, subset)
    return mask


def _labels_holding(name: str, labels: Sequence[str], codes: npt.NDArray[Any], word: str) -> Mask:
    """Which rows' labels (by their codes, -1: none) hold `word`, case aside: only the
    labels some row has weighed when the rows are fewer than the labels (a narrowed
    filter's thousands among a run's 100,000 tasks)."""
    lowered: list[str] = _keep(f"lowered {name}", (labels, len(labels)), lambda: [label if label.islower() else label.lower() for label in labels])
    verdicts = np.zeros(len(lowered) + 1, dtype=bool)
    if len(codes) < len(lowered) // 4:
        present = np.unique(codes[codes >= 0]).tolist()
        verdicts[present] = [word in lowered[code] for code in present]
    else:
        verdicts[:-1] = [word in label for label in lowered]
    found: Mask = verdicts[codes]
    return found


def _measure(rows: Picked, field: str) -> tuple[npt.NDArray[Any], Mask]:
    """A comparison's numbers over the rows, and where a row has one."""
    if field in ("turns", "errors"):
        values = np.maximum(rows.column(field), 0)
        return values, np.ones(len(values), dtype=bool)
    if field in ("reward", "elapsed"):
        values = rows.column(field)
        return values, ~np.isnan(values)
    values = rows.column(field)  # step, used, tokens: -1 where not known
    return values, values >= 0


PHASE_ORDER = {phase: i for i, phase in enumerate(ROLLOUT_PHASES)}


RANKED = ("variant", "task")
"""The columns sorted by text: a row's key is its text's rank among every text there is."""


def sort_keys(
    column: str, rows: FinishedRows, rollouts: Sequence[Rollout], now: float, subset: npt.NDArray[np.int64] | None = None
) -> tuple[npt.NDArray[np.float64], list[float]]:
    """The table's sort by `column` as numbers, over the finished rows (of `subset`,
    if given) and over `rollouts`, in one order: the finished rows' and the rollouts'
    keys then merge."""
    picked = Picked(rows, subset)
    if column == "variant":
        labels, texts = rows.labels("variant"), [rollout.variant for rollout in rollouts]
        ranks, by_code = _keep("ranks", (column, labels, len(labels), frozenset(texts)), lambda: _ranks(list(labels), texts))
        return by_code[picked.column("variant").astype(np.int64)], [float(ranks[text]) for text in texts]
    if column == "task":
        codes, named, numbers = task_codes(rows, subset)
        texts = [rollout.task_label.lower() for rollout in rollouts]
        made = _keep("ranks", (column, named, len(named), numbers, frozenset(texts)), lambda: _task_ranks(named, numbers, texts))
        return made[1][codes], [made[0].rank(text) for text in texts]
    finished, live = _numbers(column, picked, rollouts, now)
    return finished.astype(np.float64), live


def ranks_made(column: str) -> object:
    """The ranks the last sort by a text column used (None for any other column): keys
    made with other ranks than these are stale."""
    found = _kept.get("ranks")
    made_for = found[0] if found is not None else None
    return found[1] if found is not None and isinstance(made_for, tuple) and made_for[0] == column else None


def _ranks(labels: list[str], texts: list[str]) -> tuple[dict[str, int], npt.NDArray[np.float64]]:
    """Each text's rank among the labels and the texts, and the labels' ranks by code."""
    ranks = {text: rank for rank, text in enumerate(sorted({*labels, *texts}))}
    return ranks, np.array([ranks[label] for label in labels] + [-1], dtype=np.float64)


def _task_ranks(named: Sequence[str], numbers: int, texts: list[str]) -> tuple[TaskRanks, npt.NDArray[np.float64]]:
    ranks = TaskRanks(named, numbers, texts)
    return ranks, ranks.by_code(named)


def _numbers(column: str, rows: Picked, rollouts: Sequence[Rollout], now: float) -> tuple[npt.NDArray[Any], list[float]]:
    count = rows.count
    if column == "number":
        return rows.column("number") + float(1 << 32), [float((r.run << 32) + r.rollout_index) for r in rollouts]
    if column in ("step", "used", "tokens"):
        values = rows.column(column)
        live = [getattr(r, column) for r in rollouts]
        return np.where(values >= 0, values, NONE_LAST), [NONE_LAST if value is None else float(value) for value in live]
    if column == "phase":
        ok = rows.column("ok") != 0
        return np.where(ok, PHASE_ORDER["done"], PHASE_ORDER["error"]), [float(PHASE_ORDER.get(r.phase, len(PHASE_ORDER))) for r in rollouts]
    if column == "activity":
        return np.zeros(count), [r.activity(now)[1] for r in rollouts]
    if column in ("turns", "errors"):
        return np.maximum(rows.column(column), 0), [float(getattr(r, column)) for r in rollouts]
    if column == "reward":
        values = rows.column("reward")
        return np.where(np.isnan(values), NONE_LAST, values), [NONE_LAST if r.reward is None else r.reward for r in rollouts]
    if column == "elapsed":
        return np.nan_to_num(rows.column("elapsed"), nan=0.0), [r.elapsed(now) for r in rollouts]
    if column == "flag":
        return np.zeros(count), [float(len(r.flags)) for r in rollouts]
    if column == "trace":
        return rows.pick(rows.rows.first_traces()), [trace_number(next(iter(r.trace_ids), None)) for r in rollouts]
    raise KeyError(column)


TRACE_CHARACTERS = 7
"""A trace id's leading characters the Trace column's sort weighs, each as its code
(128 and over as 127): as many as a float holds exactly."""


def trace_number(trace_id: str | None) -> float:
    """A trace id's place in the Trace column's sort, as its text sorts (-1: none)."""
    if not trace_id:
        return -1.0
    number = 0
    for character in trace_id[:TRACE_CHARACTERS].ljust(TRACE_CHARACTERS, "\0"):
        number = number * 128 + min(ord(character), 127)
    return float(number)


def hex_trace_numbers(high: npt.NDArray[np.uint64]) -> npt.NDArray[np.float64]:
    """`trace_number` of 32-hex ids, from their high words (`Ids.high`)."""
    number = np.zeros(len(high), dtype=np.int64)
    for at in range(TRACE_CHARACTERS):
        nibble = ((high >> np.uint64(60 - 4 * at)) & np.uint64(15)).astype(np.int64)
        number = number * 128 + np.where(nibble < 10, ord("0") + nibble, ord("a") - 10 + nibble)
    return number.astype(np.float64)


UNLABELLED, NAMED, GROUPED = 0, 1, 2
"""What a finished row's task is known by: neither a name nor a group, its name, its group."""


def labelled_tasks(tasks: npt.NDArray[Any], groups: npt.NDArray[Any]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """What each row's task is known by and that label's code (its codes in the Task
    and Group columns): its name, else (its record unread) its group, whose rollouts
    share one task."""
    tasks, groups = tasks.astype(np.int64), groups.astype(np.int64)
    which = np.where(tasks >= 0, NAMED, np.where(groups >= 0, GROUPED, UNLABELLED))
    return which, np.where(tasks >= 0, tasks, np.maximum(groups, 0))


def task_cells(rows: FinishedRows) -> list[TaskCell]:
    """The finished rows without a rollout, per variant and task, as compare counts
    rollouts (`compare._add`): a row done with a reward is scored, any other failed.
    A row's task is its name where known, else its group's (as `RunRows` numbers it)."""
    alone = np.flatnonzero(~rows.has_rollout())
    if not len(alone):
        return []
    variant = rows.column("variant")[alone].astype(np.int64)
    which, label = labelled_tasks(rows.column("task")[alone], rows.column("group")[alone])
    groups, first, inverse = np.unique(np.stack([variant, which, label], axis=1), axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(groups) + 1))
    reward = rows.column("reward")[alone][order]
    scored = (rows.column("ok")[alone][order] != 0) & ~np.isnan(reward)
    turns = np.maximum(rows.column("turns")[alone][order], 0)
    tokens = rows.column("tokens")[alone][order]
    seconds = np.nan_to_num(rows.column("elapsed")[alone][order], nan=0.0)
    errors = np.maximum(rows.column("errors")[alone][order], 0)
    task_index = rows.column("task_index")[alone][first]
    variants, tasks, group_labels = rows.labels("variant"), rows.labels("task"), rows.labels("group")
    found: list[TaskCell] = []
    listed = groups.tolist()
    for at in np.argsort(first, kind="stable").tolist():  # in the order the rows first met each task
        code, kind, text = listed[at]
        span = slice(int(bounds[at]), int(bounds[at + 1]))
        good = scored[span]
        data = {"name": tasks[text]} if kind == NAMED else {"group": group_labels[text]} if kind == GROUPED else {}
        cell = Cell(
            rewards=reward[span][good].tolist(), turns=turns[span][good].tolist(), tokens=tokens[span][good & (tokens[span] >= 0)].tolist(),
            seconds=seconds[span][good].tolist(), errors=int(errors[span][good].sum()), failed=int((~good).sum()),
        )
        index = int(task_index[at])
        found.append((variants[code], task_identity(None, data), (index, tasks[text] if kind == NAMED else f"task {index}"), cell))
    return found
