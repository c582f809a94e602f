"""`CodedTaskNumbers` numbers tasks as a text key per task would (`TaskNumbers`): the
same task indexes and rollout numbers for any batches of label codes, whatever order
they come in, and no index given twice after the table's labels are forgotten."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tracewatch.core.engine.coded_task_numbers import CodedTaskNumbers
from tracewatch.core.recordings.load_episodes import TaskNumbers
from tracewatch.core.session.finished_columns import GROUPED, NAMED, UNLABELLED

tasks = st.tuples(st.sampled_from([UNLABELLED, NAMED, GROUPED]), st.integers(0, 40)).map(
    lambda task: (task[0], 0 if task[0] == UNLABELLED else task[1])
)
batches = st.lists(st.dictionaries(tasks, st.integers(1, 5), min_size=1, max_size=12), max_size=8)


@given(batches=batches)
def test_tasks_are_numbered_as_a_text_key_per_task_numbers_them(batches):
    coded, texts = CodedTaskNumbers(), TaskNumbers()
    for batch in batches:
        keys = list(batch)  # in the order first met
        which, codes, counts = (np.array(values) for values in zip(*((w, c, batch[(w, c)]) for w, c in keys), strict=True))
        task, first = coded.reserve(which, codes, counts)
        expected = [texts.reserve(f"{w}:{c}", batch[(w, c)]) for w, c in keys]
        assert list(zip(task.tolist(), first.tolist(), strict=True)) == expected


@given(before=batches, after=batches)
def test_a_replaced_table_s_tasks_are_new_tasks(before, after):
    numbers = CodedTaskNumbers()
    given_out: set[int] = set()
    for phase, batches_ in enumerate((before, after)):
        if phase:
            numbers.forget_labels()
        seen: dict[tuple[int, int], int] = {}
        for batch in batches_:
            for (which, code), count in batch.items():
                task, first = numbers.of(which, code)
                numbers.reserve(np.array([which]), np.array([code]), np.array([count - 1]))
                assert first == 0 if (which, code) not in seen else task == seen[(which, code)]
                assert (which, code) in seen or task not in given_out, "an index given twice"
                seen[(which, code)] = task
                given_out.add(task)
    assert numbers.tasks == len(given_out)
