"""The A/B answer: per task, each variant's finished rollouts side by side, each
variant's mean reward with its standard error, and the tasks where they disagree.

Rollouts are matched across variants and sources by task: verifiers' task key, else
the task's data (`tracewatch.core.session.task_identity`). Only finished rollouts count. The mean,
pass@k, turns, tokens and time are over the *scored* ones: done with a reward. A
rollout that failed (a provider error, a crashed server, no reward) or was cancelled
says nothing about the variant's answers, so it is not averaged in as reward 0
(that would make a flaky endpoint look like a worse model); it is counted in its own
column, failed or cancelled, so it is never hidden either.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from tracewatch.core.run.durations import seconds_text
from tracewatch.core.session.contracts import StoreView
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.status import Status

PASS = 1.0
"""A rollout passes when its reward reaches this (verifiers' binary rewards)."""


@dataclass
class Cell:
    """One variant's rollouts of one task: the scored ones' numbers, and how many
    failed or were cancelled."""

    rewards: list[float] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    errors: int = 0
    """Failed model calls the scored rollouts recovered from (retried)."""
    failed: int = 0
    cancelled: int = 0

    @property
    def k(self) -> int:
        """The scored rollouts."""
        return len(self.rewards)

    @property
    def passed(self) -> bool:
        """pass@k: any of the k rollouts passed."""
        return any(reward >= PASS for reward in self.rewards)

    @property
    def mean(self) -> float | None:
        return _mean(self.rewards)


@dataclass
class Summary:
    """A variant over every task: mean reward ± standard error over its scored
    rollouts, pass@k over the tasks it scored, and the rollouts that failed or were
    cancelled."""

    mean: float | None
    stderr: float | None
    scored: int
    passed: int
    tasks: int
    failed: int
    cancelled: int

    def text(self) -> str:
        mean = "n/a" if self.mean is None else f"{self.mean:.3f}" + (f" ± {self.stderr:.3f}" if self.stderr is not None else "")
        return f"mean reward {mean} over {self.scored} scored · pass@k {self.passed}/{self.tasks} tasks · {self.failed} failed · {self.cancelled} cancelled"


@dataclass
class Comparison:
    variants: list[str]
    tasks: dict[tuple[int, str], dict[str, Cell]]
    """(task index, task label) -> variant -> its rollouts of that task."""

    def disagreements(self) -> list[tuple[int, str]]:
        """Tasks where the variants' pass@k differ (one passes, another does not)."""
        return [
            task
            for task, cells in self.tasks.items()
            if len({cells[v].passed for v in self.variants if v in cells and cells[v].k}) > 1
        ]

    def summary(self, variant: str) -> Summary:
        cells = [cells[variant] for cells in self.tasks.values() if variant in cells]
        rewards = [r for cell in cells for r in cell.rewards]
        scored = [cell for cell in cells if cell.k]
        failed, cancelled = sum(cell.failed for cell in cells), sum(cell.cancelled for cell in cells)
        return Summary(_mean(rewards), _stderr(rewards), len(rewards), sum(cell.passed for cell in scored), len(scored), failed, cancelled)


TaskCell = tuple[str, str, tuple[int, str], Cell]
"""Finished rows kept as columns, counted already: (variant, task identity, the
task's index and label, the cell of that variant's rows of the task)."""


def compare(groups: Mapping[str, Iterable[Rollout]], counted: Iterable[TaskCell] = ()) -> Comparison:
    """Variant name -> its rollouts (from one session, or from several sources), and
    the cells of rows counted elsewhere (`finished_columns.task_cells`). A task is
    matched across them by its identity (`Rollout.task_identity`) and shown with the
    index and label of the first variant that ran it."""
    tasks: dict[tuple[int, str], dict[str, Cell]] = {}
    shown: dict[str, tuple[int, str]] = {}
    by_variant: dict[str, list[TaskCell]] = {}
    for found in counted:
        by_variant.setdefault(found[0], []).append(found)
    for name, rollouts in groups.items():
        for rollout in rollouts:
            if rollout.status.finished:
                task = shown.setdefault(rollout.task_identity, (rollout.task_index, rollout.task_label))
                _add(tasks.setdefault(task, {}).setdefault(name, Cell()), rollout)
        for _, identity, place, cell in by_variant.get(name, ()):
            task = shown.setdefault(identity, place)
            _merge(tasks.setdefault(task, {}).setdefault(name, Cell()), cell)
    return Comparison(list(groups), dict(sorted(tasks.items())))


def compare_store(store: StoreView) -> Comparison:
    """The store's variants compared: its rollouts, and its finished rows kept as
    columns counted from the columns (`finished_columns.task_cells`)."""
    groups = {name: list(store.variant_rollouts(name)) for name in store.variants}
    if store.finished_rows is None:
        return compare(groups)
    from tracewatch.core.session.finished_columns import task_cells  # numpy: only for a session that keeps columns

    return compare(groups, task_cells(store.finished_rows))


def _merge(cell: Cell, other: Cell) -> None:
    cell.rewards += other.rewards
    cell.turns += other.turns
    cell.tokens += other.tokens
    cell.seconds += other.seconds
    cell.errors += other.errors
    cell.failed += other.failed
    cell.cancelled += other.cancelled


def _add(cell: Cell, rollout: Rollout) -> None:
    """A finished rollout: scored (done with a reward), cancelled, or failed (an error,
    or done without a reward: nothing scored it)."""
    reward = rollout.reward
    if rollout.status is Status.CANCELLED:
        cell.cancelled += 1
    elif rollout.status is not Status.DONE or reward is None:
        cell.failed += 1
    else:
        cell.rewards.append(reward)
        cell.turns.append(rollout.turns)
        if rollout.tokens is not None:  # a count not reported is not a count of 0
            cell.tokens.append(rollout.tokens)
        cell.seconds.append(rollout.elapsed(rollout.ended_at or rollout.started_at or 0.0))
        cell.errors += rollout.errors


def _mean(values: list[float]) -> float | None:
    """The mean of finite rewards, finite whatever their size: a float sum of two
    1e308s is inf, so past float's range the sum is exact."""
    if not values:
        return None
    total = sum(values)
    return total / len(values) if math.isfinite(total) else float(sum(map(Fraction, values)) / len(values))


def _stderr(values: list[float]) -> float | None:
    """The standard error of the mean (sample standard deviation / sqrt(n)); the
    squares scaled by the widest deviation when they would overflow (rewards of
    1e308), so a spread past float's range is inf, never an OverflowError."""
    if len(values) < 2:
        return None
    mean = _mean(values)
    assert mean is not None
    try:
        variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    except OverflowError:
        widest = max(abs(v - mean) for v in values)
        if not math.isfinite(widest):
            return math.inf
        variance = sum(((v - mean) / widest) ** 2 for v in values) / (len(values) - 1)
        return widest * math.sqrt(variance / len(values))
    return math.sqrt(variance / len(values))


COUNT_COLUMNS = ("fail", "cxl")
"""Beside each variant's column: its failed and cancelled rollouts of the task."""


def compare_lines(comparison: Comparison) -> list[str]:
    """The comparison as plain text: a row per task, a column per variant (and its
    failed and cancelled counts), then each variant's summary and the tasks where
    they disagree."""
    variants = comparison.variants
    width = min(40, max([4, *(len(label) for _, label in comparison.tasks)]))
    texts = {name: variant_cells(comparison, name) for name in variants}
    widths = {name: max([len(name[:24]), *map(len, texts[name].values())]) for name in variants}
    head = f"{'task':<{width}}" + "".join(f"  {name[:24]:>{widths[name]}}" + "".join(f" {title:>4}" for title in COUNT_COLUMNS) for name in variants)
    lines = [head, "-" * len(head)]
    disagree = set(comparison.disagreements())
    for task, cells in comparison.tasks.items():
        label = task[1][:width]
        row = f"{label:<{width}}"
        for name in variants:
            row += f"  {texts[name][task]:>{widths[name]}}" + "".join(f" {count:>4}" for count in count_texts(cells.get(name)))
        lines.append(row.rstrip() + ("  ← differ" if task in disagree else ""))
    lines.append("-" * len(head))
    lines += [f"{name}: {comparison.summary(name).text()}" for name in variants]
    lines.append(f"variants disagree on {len(disagree)} of {len(comparison.tasks)} tasks")
    return lines


def cell_parts(cell: Cell | None) -> tuple[str, ...]:
    """`0.50`, `(1/2)`, `3t`, `2.1s`, `1!`: mean reward, passes of the scored, mean
    turns, mean time (whole seconds from 10 s: a narrow pane keeps every column), and
    the failed calls they recovered from (blank when none). `–` alone: none scored."""
    if cell is None or not cell.k:
        return ("–",)
    passes = sum(r >= PASS for r in cell.rewards)
    turns = sum(cell.turns) / cell.k
    seconds = sum(cell.seconds) / cell.k
    return f"{cell.mean:.2f}", f"({passes}/{cell.k})", f"{turns:.0f}t", seconds_text(seconds, 1 if seconds < 10 else 0), f"{cell.errors}!" if cell.errors else ""


def variant_cells(comparison: Comparison, name: str) -> dict[tuple[int, str], str]:
    """A variant's cells, task by task, each part right-aligned in a column of its own
    across the tasks: a cell with more in it (`1!`, `(10/12)`) never shifts its row."""
    parts = {task: cell_parts(cells.get(name)) for task, cells in comparison.tasks.items()}
    full = [each for each in parts.values() if len(each) > 1]
    widths = [max(len(each[i]) for each in full) for i in range(len(full[0]))] if full else []
    if widths and not widths[-1]:  # no retried errors in this column: no blank part
        widths.pop()
    return {task: "–" if len(each) == 1 else " ".join(part.rjust(width) for part, width in zip(each, widths)) for task, each in parts.items()}


def count_texts(cell: Cell | None) -> tuple[str, str]:
    """The failed and cancelled counts, blank when none."""
    if cell is None:
        return "", ""
    return str(cell.failed or ""), str(cell.cancelled or "")
