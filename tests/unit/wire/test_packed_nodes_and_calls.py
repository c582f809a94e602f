"""A trace's committed nodes and calls kept packed (`PackedList`): whatever they hold,
what a reader gets back, and what an export writes, is exactly what verifiers 0.4.0's
own assembly holds for the same frames, through later `links`; and what is kept gives
the garbage collector nothing to walk."""

from __future__ import annotations

import gc
import json

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from verifiers.v1.serve import EpisodeAssembly as VerifiersAssembly
from verifiers.v1.serve.delta import TraceSummary

from core.wire.assembly import AssemblyError, EpisodeAssembly
from core.wire.episode_json import episode_json
from core.wire.packed_list import PackedList
from core.wire.protocol import Packed, plain, unpack, unpack_delta

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4) | st.integers(0, 9), inner, max_size=3),
    max_leaves=8,
)
TOKENS = st.one_of(
    st.lists(st.integers(0, 2**32), min_size=16, max_size=200),
    st.lists(st.floats(allow_nan=False), min_size=16, max_size=200),
    st.lists(st.booleans(), max_size=200),
)
NODES = st.fixed_dictionaries(
    {"message": st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]), "content": st.text(max_size=30)})},
    optional={
        "parent": st.none() | st.integers(0, 9),
        "semantic_parents": st.none() | st.lists(st.integers(0, 9), max_size=3),
        "sampled": st.booleans(),
        "token_ids": TOKENS,
        "mask": TOKENS,
        "logprobs": TOKENS,
        "timestamp": st.floats(allow_nan=False),
        "extra": VALUES,
    },
)
CALLS = st.fixed_dictionaries(
    {"node": st.none() | st.integers(0, 5), "model": st.text(max_size=5)},
    optional={"usage": st.fixed_dictionaries({"prompt_tokens": st.integers(0, 9)}), "extra": VALUES},
)


def exact(value: object) -> str:
    """Equality that tells 1 from 1.0, True from 1 and a list from a tuple."""
    return json.dumps(plain(value), default=repr) + repr(plain(value))


def frames_of(first: list[dict], links: dict[int, list[int]], second: list[dict], calls: list[dict]) -> list[bytes]:
    header = {"version": 1, "id": "t", "verifiers": "0.4.0", "task": {}}
    deltas = [
        {"trace": "t", "open": header, "nodes": first, "calls": calls[:1]},
        {"trace": "t", "links": links, "nodes": second, "calls": calls[1:]},
    ]
    return [msgpack.packb(delta, use_bin_type=True) for delta in deltas]


@settings(max_examples=150, deadline=None)
@given(
    first=st.lists(NODES, min_size=1, max_size=3),
    second=st.lists(NODES, max_size=3),
    links=st.lists(st.tuples(st.integers(0, 2), st.lists(st.integers(0, 9), max_size=2)), max_size=3),
    calls=st.lists(CALLS, max_size=3),
    decode=st.sampled_from([unpack, unpack_delta]),
)
def test_kept_nodes_and_calls_read_back_as_verifiers_assembles_them(
    first: list[dict], second: list[dict], links: list[tuple[int, list[int]]], calls: list[dict], decode
) -> None:
    frames = frames_of(first, {index % len(first): new for index, new in links}, second, calls)
    ours, theirs = EpisodeAssembly(), VerifiersAssembly()
    for frame in frames:
        ours.apply(decode(frame))
        theirs.apply(unpack(frame))
    kept, expected = ours.traces["t"]["nodes"], theirs.traces["t"]["nodes"]
    assert isinstance(kept, PackedList)
    assert kept == expected and len(kept) == len(first) + len(second)
    assert [exact(node) for node in kept] == [exact(node) for node in expected]
    assert exact(kept[1:]) == exact(expected[1:])
    kept_calls = ours.traces["t"]["calls"]
    assert isinstance(kept_calls, PackedList) and exact(kept_calls) == exact(theirs.traces["t"]["calls"])
    summaries = [TraceSummary(id="t", nodes=len(expected), calls=len(calls))]
    assert episode_json(ours.finish({"id": "e"}, summaries)) == episode_json(theirs.finish({"id": "e"}, summaries))


def test_a_read_node_keeps_its_long_token_arrays_packed() -> None:
    node = {"message": {"role": "assistant", "content": "hi"}, "token_ids": list(range(4000)), "logprobs": [-0.5] * 4000}
    frame = msgpack.packb({"trace": "t", "open": {"id": "t"}, "nodes": [node]}, use_bin_type=True)
    assembly = EpisodeAssembly()
    assembly.apply(unpack_delta(frame))
    (read,) = assembly.traces["t"]["nodes"]
    assert isinstance(read["token_ids"], Packed) and isinstance(read["logprobs"], Packed)
    assert read["token_ids"] == list(range(4000)) and read["message"] == node["message"]
    assert assembly.traces["t"]["nodes"].nbytes < len(frame)  # what is kept is no bigger than what came


def test_a_node_that_cannot_be_kept_fails_its_delta_and_changes_nothing() -> None:
    assembly = EpisodeAssembly()
    assembly.apply({"trace": "t", "open": {"id": "t"}, "nodes": [{"message": {"role": "user", "content": "a"}}]})
    before = list(assembly.traces["t"]["nodes"])
    with pytest.raises(AssemblyError, match="trace t"):
        assembly.apply({"trace": "t", "nodes": [{"message": {"role": "user", "content": "b"}, "x": object()}]})
    with pytest.raises(AssemblyError, match="trace t"):
        assembly.apply({"trace": "t", "links": {0: [object()]}})
    assert assembly.traces["t"]["nodes"] == before and before[0]["semantic_parents"] == []


def test_what_is_kept_gives_the_collector_nothing_to_walk() -> None:
    """2,000 nodes and calls from frames, the frames and deltas dropped: what stays
    adds a handful of objects, not a dozen per node."""
    node = {"parent": 0, "semantic_parents": [], "message": {"role": "tool", "content": "x" * 50, "tool_calls": [{"id": "c"}]},
            "sampled": False, "token_ids": list(range(100)), "mask": [True] * 100}  # fmt: skip
    call = {"node": 0, "usage": {"prompt_tokens": 5}, "time": {"start": 1.0, "end": 2.0}}
    frames = [msgpack.packb({"trace": "t", "open": {"id": "t"}, "nodes": [node] * 20, "calls": [call] * 20})]
    frames += [msgpack.packb({"trace": "t", "nodes": [node] * 20, "calls": [call] * 20}) for _ in range(99)]
    assembly = EpisodeAssembly()
    gc.collect()
    before = len(gc.get_objects())
    for frame in frames:
        assembly.apply(unpack_delta(frame))
    gc.collect()
    assert len(assembly.traces["t"]["nodes"]) == len(assembly.traces["t"]["calls"]) == 2000
    assert len(gc.get_objects()) - before < 100
