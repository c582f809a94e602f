"""The Task column's ranks made in numpy (`TaskRanks`) against every text made and
sorted in Python, as the sort did before: the same rank for every named task, every
`task N` and every live rollout's text."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tracewatch.core.session.task_ranks import TaskRanks, numbered_order

near = st.sampled_from(
    ["task", "task ", "task 1", "task 01", "task 10", "Task 5", "task 5x", "task 99999", "TASK 3", "task ²", "task !", "task 1000", "idx=4", "", "task " + "7" * 5000]
)
"""Texts near the numbered ones, a name of 5,000 digits among them (past what `int` reads)."""
texts = st.one_of(near, st.builds(lambda n: f"task {n}", st.integers(0, 2000)), st.text(max_size=8))


def reference(named: list[str], numbers: int, live: list[str]) -> tuple[dict[str, int], list[float]]:
    folded = [label.lower() for label in [*named, *(f"task {n}" for n in range(numbers))]]
    ranks = {text: rank for rank, text in enumerate(sorted({*folded, *live}))}
    return ranks, [float(ranks[label]) for label in folded]


@given(st.lists(texts, max_size=12), st.integers(0, 1500), st.lists(texts.map(str.lower), max_size=4))
def test_every_text_ranks_as_the_texts_sort(named, numbers, live):
    ranks, by_code = reference(named, numbers, live)
    made = TaskRanks(named, numbers, live)
    assert made.by_code(named).tolist() == by_code
    assert [made.rank(text) for text in live] == [float(ranks[text]) for text in live]


@given(st.integers(0, 20_000))
def test_numbers_in_their_texts_order(numbers):
    assert numbered_order(numbers).tolist() == sorted(range(numbers), key=str)
    assert np.unique(numbered_order(numbers)).size == numbers
