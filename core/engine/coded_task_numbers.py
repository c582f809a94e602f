"""A followed run's rollouts numbered by task, as a live view numbers them (tasks in the
order first met, each task's rollouts from 0: `TaskNumbers`), keyed by the run table's
interned codes rather than by a text per task.

A task is known by its name's code in the table's `task` column, or, while its record
is unread, by its group's code (its group's rollouts share one), or by neither. A
text key per task cost about 200 bytes (the text, its map entry, its count): a million
episodes in groups that span envs held 117 MB of them. Here a label costs 4 bytes in
each variant whose rows use it, and a task 8.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tracewatch.core.recordings.prime_rl.columns import MISSING, Growable
from tracewatch.core.session.finished_columns import GROUPED, NAMED, UNLABELLED


class CodedTaskNumbers:
    """One variant's tasks and the rollouts reserved in each."""

    def __init__(self) -> None:
        self._task_of = {NAMED: Growable(np.int32), GROUPED: Growable(np.int32)}
        """Per label code, its task's index (`MISSING`: not met yet)."""
        self._unlabelled = MISSING
        self._reserved = Growable(np.int64)
        """Per task index, the rollouts numbered in it so far."""

    @property
    def tasks(self) -> int:
        return self._reserved.size

    def forget_labels(self) -> None:
        """The table was replaced: its codes mean other labels now. Tasks met from here
        on are new tasks; no index is given twice."""
        self._task_of = {NAMED: Growable(np.int32), GROUPED: Growable(np.int32)}
        self._unlabelled = MISSING

    def of(self, which: int, code: int) -> tuple[int, int]:
        """One rollout of a task: its task's index and its own within the task."""
        task, first = self.reserve(np.array([which]), np.array([code]), np.array([1]))
        return int(task[0]), int(first[0])

    def reserve(
        self, which: npt.NDArray[Any], codes: npt.NDArray[Any], counts: npt.NDArray[Any]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """`counts[i]` rollouts of each of distinct tasks (`which[i]`, `codes[i]`), given
        in the order first met: each task's index and the first rollout's index in it."""
        task = np.full(len(which), MISSING, dtype=np.int64)
        for kind, lookup in self._task_of.items():
            mine = which == kind
            if mine.any():
                _fit(lookup, int(codes[mine].max()) + 1)
                task[mine] = lookup.values[codes[mine]]
        bare = which == UNLABELLED
        task[bare] = self._unlabelled
        new = task < 0
        fresh = self.tasks + np.arange(int(new.sum()), dtype=np.int64)
        task[new] = fresh
        for kind, lookup in self._task_of.items():
            mine = new & (which == kind)
            lookup.values[codes[mine]] = task[mine]
        if (new & bare).any():
            self._unlabelled = int(task[new & bare][0])
        self._reserved.extend(np.zeros(len(fresh), dtype=np.int64))
        first = self._reserved.values[task].copy()
        self._reserved.values[task] += counts
        return task, first


def _fit(column: Growable, size: int) -> None:
    if column.size < size:
        column.extend(np.full(size - column.size, MISSING, dtype=column.values.dtype))
