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
