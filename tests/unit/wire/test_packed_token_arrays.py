"""Token arrays kept packed: a delta read with `unpack_delta`, or a record holding one read
with `unpack_record`, equals the same bytes read whole, whatever they hold (hypothesis),
and packs and exports as the lists."""

from __future__ import annotations

import json

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracewatch.core.wire.episode_json import episode_json
from tracewatch.core.wire.protocol import PACKED_FIELDS, Packed, pack, plain, unpack, unpack_delta, unpack_record

NUMBERS = st.one_of(
    st.lists(st.integers(0, 2**32), max_size=300),
    st.lists(st.booleans(), max_size=300),
    st.lists(st.floats(allow_nan=False), max_size=300),
    st.lists(st.one_of(st.integers(-5, 5), st.floats(allow_nan=False), st.none()), max_size=40),
    st.none(),
    st.text(max_size=5),
)
NODES = st.fixed_dictionaries(
    {"message": st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=20)})},
    optional={field: NUMBERS for field in sorted(PACKED_FIELDS)} | {"sampled": st.booleans(), "parent": st.none() | st.integers(0, 9)},
)
DELTAS = st.fixed_dictionaries(
    {"trace": st.text(max_size=4)},
    optional={"nodes": st.lists(NODES, max_size=3) | st.integers(-9, 9), "set": st.dictionaries(st.text(max_size=4), st.integers(-9, 9), max_size=2)},
)


RECORDS = st.fixed_dictionaries(
    {"k": st.sampled_from(["delta", "reply"]), "d": DELTAS | st.integers(-9, 9)},
    optional={"t": st.floats(allow_nan=False), "r": st.text(max_size=4)},
)


def exact(value: object) -> str:
    """Equality that tells 1 from 1.0 and True from 1."""
    return json.dumps(value, default=repr) + repr(value)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(delta=DELTAS)
def test_a_delta_reads_the_same_with_its_arrays_packed(delta: dict) -> None:
    frame = msgpack.packb(delta, use_bin_type=True)
    whole, kept = unpack(frame), unpack_delta(frame)
    assert kept == whole
    assert exact(plain(kept)) == exact(whole)
    assert unpack(pack(kept)) == whole  # packs back as the lists
    assert json.loads(episode_json(kept)) == json.loads(episode_json(whole))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(delta=DELTAS, cut=st.integers(1, 50), junk=st.binary(max_size=4))
def test_a_damaged_frame_fails_as_unpack_fails(delta: dict, cut: int, junk: bytes) -> None:
    frame = msgpack.packb(delta, use_bin_type=True)
    for damaged in (frame[:-cut], frame + junk):
        try:
            expected = unpack(damaged)
        except Exception as error:  # noqa: BLE001 - whatever unpack raises, unpack_delta raises
            with pytest.raises(type(error)):
                unpack_delta(damaged)
        else:
            assert unpack_delta(damaged) == expected


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(record=RECORDS, cut=st.integers(0, 50), junk=st.binary(max_size=4))
def test_a_record_reads_the_same_with_its_arrays_packed(record: dict, cut: int, junk: bytes) -> None:
    data = msgpack.packb(record, use_bin_type=True)
    whole, kept = unpack(data), unpack_record(data)
    assert kept == whole
    assert exact(plain(kept)) == exact(whole)
    for damaged in (data[:-cut] if cut else data, data + junk):
        try:
            expected = unpack(damaged)
        except Exception as error:  # noqa: BLE001 - whatever unpack raises, unpack_record raises
            with pytest.raises(type(error)):
                unpack_record(damaged)
        else:
            assert unpack_record(damaged) == expected


def test_a_recorded_deltas_long_arrays_stay_packed() -> None:
    node = {"token_ids": list(range(1000)), "logprobs": [-0.5] * 1000}
    record = unpack_record(msgpack.packb({"k": "delta", "d": {"trace": "t", "nodes": [node]}, "t": 1.0}))
    assert type(record["d"]["nodes"][0]["token_ids"]) is Packed and record["t"] == 1.0


def test_long_arrays_stay_packed() -> None:
    node = {"token_ids": list(range(1000)), "mask": [True] * 1000, "logprobs": [-0.5] * 1000, "entropies": [0.1]}
    kept = unpack_delta(msgpack.packb({"trace": "t", "nodes": [node]}))
    (packed,) = kept["nodes"]
    assert {key for key, value in packed.items() if isinstance(value, Packed)} == {"token_ids", "mask", "logprobs"}
    assert len(packed["token_ids"]) == 1000 and packed["token_ids"][999] == 999
    assert packed["entropies"] == [0.1]  # short: decoded as it came
