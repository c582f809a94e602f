"""The Task column's sort over a million finished rows: each task text's rank in the
order its lower-case text sorts. A row whose task is not known reads `task N` (N its
index among its variant's tasks), and a run can hold a hundred thousand of them: those
are ranked in numpy by their digits' text order (`task 10` before `task 9`, as the
texts sort), never made as strings; only the named tasks are sorted as text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

PREFIX = "task "
"""What every unnamed task's text starts with."""


def numbered_order(numbers: int) -> npt.NDArray[np.int64]:
    """0 .. numbers-1 in the order their decimal texts sort: `1 < 10 < 100 < 2`. A
    number's digits scaled to one width compare as its text does; a text that is a
    prefix of another (equal scaled) comes first, as the shorter."""
    values = np.arange(numbers, dtype=np.int64)
    powers = 10 ** np.arange(1, 19, dtype=np.int64)
    digits = np.searchsorted(powers, values, side="right") + 1
    width = int(digits.max()) if numbers else 1
    scaled = values * 10 ** (width - digits)
    return np.lexsort((digits, scaled))


def numbered(text: str, numbers: int) -> int | None:
    """The N of a text that is exactly `task N` for one of the numbered tasks."""
    rest = text[len(PREFIX) :]
    if not text.startswith(PREFIX) or not rest.isascii() or not rest.isdigit() or (len(rest) > 1 and rest[0] == "0"):
        return None
    if len(rest) > len(str(numbers)):  # past every task's number, and past what `int` reads (4,300 digits)
        return None
    number = int(rest)
    return number if number < numbers else None


class TaskRanks:
    """Every task text's rank (dense, from 0): the named tasks' (lower case), the
    numbered ones' `task 0` .. `task numbers-1`, and any other texts asked for (the
    live rollouts' labels)."""

    def __init__(self, named: Iterable[str], numbers: int, others: Iterable[str] = ()) -> None:
        order = numbered_order(numbers)
        texts = sorted({text for text in (*(label.lower() for label in named), *others) if numbered(text, numbers) is None})
        before = np.array([self._numbered_before(text, order) for text in texts], dtype=np.int64)
        self._named = {text: position + int(count) for position, (text, count) in enumerate(zip(texts, before.tolist(), strict=True))}
        at = np.arange(numbers, dtype=np.int64)
        ranks = np.empty(numbers, dtype=np.float64)
        ranks[order] = at + np.searchsorted(before, at, side="right")
        self.numbered = ranks
        """Per N, the rank of `task N`."""

    @staticmethod
    def _numbered_before(text: str, order: npt.NDArray[np.int64]) -> int:
        """How many numbered texts sort before `text` (which is none of them)."""
        if not text.startswith(PREFIX):
            return 0 if text < PREFIX else len(order)
        low, high = 0, len(order)
        while low < high:
            middle = (low + high) // 2
            if f"{PREFIX}{order[middle]}" < text:
                low = middle + 1
            else:
                high = middle
        return low

    def rank(self, text: str) -> float:
        """A lower-case text's rank: a named task's, or a numbered one's."""
        number = numbered(text, len(self.numbered))
        return float(self.numbered[number]) if number is not None else float(self._named[text])

    def by_code(self, named: Sequence[str]) -> npt.NDArray[np.float64]:
        """Ranks by task code (`finished_columns.task_codes`): the named labels', then `task 0` ..."""
        return np.concatenate([np.array([self.rank(label.lower()) for label in named], dtype=np.float64), self.numbered])
