"""`Ids` finds each id where a list of the texts would, whether it sits in the sorted
index or in the unindexed tail, for hex ids that share their leading bits (the index
keeps only those), ids that are not hex, and none."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracewatch.core.recordings.prime_rl import columns
from tracewatch.core.recordings.prime_rl.columns import MISSING, Ids

# few leading digits and few trailing ones: ids that share their leading 32 bits, and equal ids
hex_ids = st.builds(lambda head, tail: f"{head:08x}" + "0" * 16 + f"{tail:08x}", st.integers(0, 3), st.integers(0, 5))
values = st.one_of(hex_ids, hex_ids, st.sampled_from(["not-hex", "A" * 32, "g" * 32, ""]), st.none())


@pytest.fixture(autouse=True)
def small_folds(monkeypatch):
    monkeypatch.setattr(columns, "FOLD_FROM", 4)
    monkeypatch.setattr(columns, "_BLOCK", 5)  # a word searched over several blocks of ids


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blocks=st.lists(st.lists(values, max_size=12), min_size=1, max_size=6), others=st.lists(values, max_size=12))
def test_an_id_is_found_where_a_list_of_them_finds_it(blocks, others):
    ids, seen = Ids(), []
    for block in blocks:
        ids.extend(block)
        seen.extend(block)
        asked = [value for value in seen + others if value is not None]
        first = {value: seen.index(value) if value in seen else MISSING for value in asked}
        assert ids.find_many(asked) == [first[value] for value in asked]
        assert [ids.get(position) for position in range(len(seen))] == seen
        other = Ids()
        other.extend(others + seen)
        positions = np.arange(len(others) + len(seen), dtype=np.int64)
        expected = [first[value] if value is not None else MISSING for value in others + seen]
        assert ids.locate(other, positions).tolist() == expected


# ids of few distinct digits, so a word is often held, across the halves and at the ends
few_digit_ids = st.text("0f3", min_size=32, max_size=32)
words = st.one_of(st.text("0f3", min_size=1, max_size=9), st.text("0123456789abcdef", min_size=1, max_size=33))


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(few_digit_ids, min_size=1, max_size=40), asked=st.lists(words, min_size=1, max_size=6), data=st.data())
def test_a_word_held_or_started_with_is_found_on_the_packed_ids_as_in_their_texts(texts, asked, data):
    ids = Ids()
    ids.extend(texts)
    some = np.array(data.draw(st.lists(st.integers(0, len(texts) - 1), max_size=10)), dtype=np.int64)
    for word in asked + [text[start:start + width] for text in texts[:3] for start, width in ((0, 5), (13, 6), (29, 3))]:
        for positions in (np.arange(len(texts), dtype=np.int64), some):
            chosen = [texts[position] for position in positions.tolist()]
            assert ids.holding(positions, word).tolist() == [word in text for text in chosen], word
            assert ids.starting(positions, word).tolist() == [text.startswith(word) for text in chosen], word
