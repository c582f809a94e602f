"""A trace's committed nodes and calls kept packed (`PackedList`): whatever they hold,
what a reader gets back, and what an export writes, is exactly what verifiers 0.4.0's
own assembly holds for the same frames, through later `links`; and what is kept gives
the garbage collector nothing to walk."""

from __future__ import annotations

import gc
import io
import json

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from verifiers.v1.serve import EpisodeAssembly as VerifiersAssembly
from verifiers.v1.serve.delta import TraceSummary

from tests.support.repo import FIXTURE as RECORDED
from tracewatch.core.wire import assembly as assembly_module
from tracewatch.core.wire.assembly import AssemblyError, EpisodeAssembly
from tracewatch.core.wire.episode_json import episode_json
from tracewatch.core.wire.packed_list import PackedList, pack_node
from tracewatch.core.wire.protocol import KeptItems, Packed, pack, plain, unpack, unpack_delta

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


@pytest.mark.slow
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


@pytest.mark.slow
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


def recorded_and_long_frames() -> list[bytes]:
    """The recorded verifiers stream's frames, and a delta whose nodes carry long token
    arrays (kept `Packed` while read)."""
    data = RECORDED.joinpath("deltas.msgpack").read_bytes()
    unpacker = msgpack.Unpacker(io.BytesIO(data), raw=False, strict_map_key=False)
    frames, start = [], 0
    for _ in unpacker:
        frames.append(data[start : unpacker.tell()])
        start = unpacker.tell()
    node = {"parent": None, "semantic_parents": [], "message": {"role": "assistant", "content": "x"},
            "token_ids": list(range(4000)), "logprobs": [-0.5] * 4000, "mask": [True] * 4000}  # fmt: skip
    call = {"node": 1, "usage": {"prompt_tokens": 4000, "completion_tokens": 4000}}
    return [*frames, msgpack.packb({"trace": "long", "open": {"id": "long"}, "nodes": [node, node], "calls": [call]})]


def test_a_node_or_call_that_came_with_its_bytes_is_kept_as_them_not_packed_again(monkeypatch) -> None:
    """What the client and a recording's read-back decode (`unpack_delta`) is kept as
    the bytes it arrived as: the assembly packs nothing, and holds what verifiers does."""
    frames = recorded_and_long_frames()

    def never(value: object) -> bytes:
        raise AssertionError("a node or call that came with its bytes was packed again")

    monkeypatch.setattr(assembly_module, "pack_node", never)
    monkeypatch.setattr(assembly_module, "pack", never)
    ours, theirs = EpisodeAssembly(), VerifiersAssembly()
    for frame in frames:
        ours.apply(unpack_delta(frame))
        theirs.apply(unpack(frame))
    assert ours.traces.keys() == theirs.traces.keys()
    for trace_id, trace in theirs.traces.items():
        kept = ours.traces[trace_id]
        assert exact(kept["nodes"]) == exact(trace["nodes"]) and exact(kept["calls"]) == exact(trace["calls"])


def test_a_kept_items_bytes_are_what_a_fresh_pack_gives() -> None:
    """From a msgpack writer (verifiers' server), the bytes a node or call is kept as
    are exactly what packing its decoded value gives: keeping them changes no size."""
    for frame in recorded_and_long_frames():
        delta = unpack_delta(frame)
        for key, pack_item in (("nodes", pack_node), ("calls", pack)):
            items = delta.get(key)
            if items is not None:
                assert isinstance(items, KeptItems) and len(items.raw) == len(items)
                assert [pack_item(item) for item in items] == items.raw


def test_a_node_from_another_writer_reads_back_as_it_was_sent() -> None:
    """Bytes another writer chose (single floats, a str8 key) are kept as they came and
    read back as the value they encode, not as a fresh pack would spell it."""
    node = {"semantic_parents": [], "message": {"role": "user", "content": "hi"}, "timestamp": 1.5, "token_ids": list(range(100))}
    packed = msgpack.packb(node, use_single_float=True).replace(b"\xa7message", b"\xd9\x07message")
    frame = b"\x83" + msgpack.packb("trace") + msgpack.packb("t") + msgpack.packb("open") + msgpack.packb({"id": "t"})
    frame += msgpack.packb("nodes") + b"\x91" + packed
    delta = unpack_delta(frame)
    assert delta["nodes"].raw == [packed] and pack_node(delta["nodes"][0]) != packed
    assembly = EpisodeAssembly()
    assembly.apply(delta)
    assert exact(assembly.traces["t"]["nodes"]) == exact([node]) == exact(unpack(frame)["nodes"])
