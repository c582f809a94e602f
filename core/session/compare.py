"""The A/B answer: per task, each variant's finished rollouts side by side, each
variant's mean reward with its standard error, and the tasks where they disagree.

Rollouts are matched across variants by task (its index and label, as variants
sharing a task list number them alike). Only finished rollouts count; one that
failed without a reward counts as reward 0 for pass@k and the mean (it did not
pass), and is counted in errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from core.session.store import Rollout, RolloutStore

PASS = 1.0
"""A rollout passes when its reward reaches this (verifiers' binary rewards)."""


@dataclass
class Cell:
    """One variant's rollouts of one task."""

    rewards: list[float] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    errors: int = 0

    @property
    def k(self) -> int:
        return len(self.rewards)

    @property
    def passed(self) -> bool:
        """pass@k: any of the k rollouts passed."""
        return any(reward >= PASS for reward in self.rewards)

    @property
    def mean(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None


@dataclass
class Summary:
    """A variant over every task: mean reward ± standard error, pass@k rate."""

    mean: float | None
    stderr: float | None
    passed: int
    tasks: int


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
        rewards = [r for cells in self.tasks.values() if variant in cells for r in cells[variant].rewards]
        scored = [cells[variant] for cells in self.tasks.values() if variant in cells and cells[variant].k]
        return Summary(_mean(rewards), _stderr(rewards), sum(cell.passed for cell in scored), len(scored))


def compare(groups: Mapping[str, Iterable[Rollout]]) -> Comparison:
    """Variant name -> its rollouts (from one session, or from several sources)."""
    tasks: dict[tuple[int, str], dict[str, Cell]] = {}
    for name, rollouts in groups.items():
        for rollout in rollouts:
            if rollout.status.finished:
                _add(tasks.setdefault((rollout.task_index, rollout.task_label), {}).setdefault(name, Cell()), rollout)
    return Comparison(list(groups), dict(sorted(tasks.items())))


def compare_store(store: RolloutStore) -> Comparison:
    return compare({name: list(store.variant_rollouts(name)) for name in store.variants})


def _add(cell: Cell, rollout: Rollout) -> None:
    reward = rollout.reward
    cell.rewards.append(reward if reward is not None else 0.0)
    cell.turns.append(rollout.turns)
    cell.tokens.append(rollout.tokens)
    cell.seconds.append(rollout.elapsed(rollout.ended_at or rollout.started_at or 0.0))
    cell.errors += rollout.errors or int(reward is None)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _stderr(values: list[float]) -> float | None:
    """The standard error of the mean (sample standard deviation / sqrt(n))."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(variance / len(values))


def compare_lines(comparison: Comparison) -> list[str]:
    """The comparison as plain text: a row per task, a column per variant, then each
    variant's mean ± standard error and the tasks where they disagree."""
    variants = comparison.variants
    width = min(40, max([4, *(len(label) for _, label in comparison.tasks)]))
    head = f"{'task':<{width}}" + "".join(f"  {name[:24]:>24}" for name in variants)
    lines = [head, "-" * len(head)]
    disagree = set(comparison.disagreements())
    for task, cells in comparison.tasks.items():
        label = task[1][:width]
        row = f"{label:<{width}}"
        for name in variants:
            cell = cells.get(name)
            row += f"  {cell_text(cell):>24}"
        lines.append(row + ("  ← differ" if task in disagree else ""))
    lines.append("-" * len(head))
    for name in variants:
        s = comparison.summary(name)
        mean = "n/a" if s.mean is None else f"{s.mean:.3f}" + (f" ± {s.stderr:.3f}" if s.stderr is not None else "")
        lines.append(f"{name}: mean reward {mean} · pass@k {s.passed}/{s.tasks} tasks")
    lines.append(f"variants disagree on {len(disagree)} of {len(comparison.tasks)} tasks")
    return lines


def cell_text(cell: Cell | None) -> str:
    """`0.50 (1/2) 3t 2.1s`: mean reward, passes of k, mean turns, mean time; `!` errors."""
    if cell is None or not cell.k:
        return "–"
    passes = sum(r >= PASS for r in cell.rewards)
    turns = sum(cell.turns) / cell.k
    seconds = sum(cell.seconds) / cell.k
    errors = f" {cell.errors}!" if cell.errors else ""
    return f"{cell.mean:.2f} ({passes}/{cell.k}) {turns:.0f}t {seconds:.1f}s{errors}"
