"""A node's training-token flags against their plain definition and against what the
token view can place, on generated nodes whose arrays are lists or the packed bytes the
wire keeps; and the same flags in a live store and in a recording's index of it."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracewatch.core.recordings.index import RecordingIndex
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.tokens.flags import COMPACT_STREAMS, MISALIGNED, TOOL_TRAINED, node_flags
from tracewatch.core.tokens.streams import read_message
from tracewatch.core.wire.protocol import Packed, pack, plain, unpack_delta

FLAG_ITEMS = st.one_of(st.booleans(), st.integers(-2, 3), st.sampled_from([0.0, 1.0, 0.5]), st.none(), st.text(max_size=2))
FLOATS = st.floats(allow_nan=True, allow_infinity=True)


def packed_or_list(items: st.SearchStrategy[list[Any]]) -> st.SearchStrategy[Any]:
    return st.one_of(items, items.map(lambda values: Packed(msgpack.packb(values))))


def arrays(items: st.SearchStrategy[Any], hostile: bool) -> st.SearchStrategy[Any]:
    lists = st.lists(items, max_size=8)
    return st.one_of(packed_or_list(lists), st.none(), *([st.text(max_size=3), st.integers()] if hostile else []))


def nodes(hostile: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    fields: dict[str, st.SearchStrategy[Any]] = {
        "sampled": st.booleans(),
        "message": st.one_of(st.fixed_dictionaries({"role": st.sampled_from(["assistant", "tool", "user", "system"])}), *([st.text(max_size=3)] if hostile else [])),
        "token_ids": arrays(st.integers(0, 50), hostile),
        "mask": arrays(FLAG_ITEMS if hostile else st.booleans(), hostile),
        **{name: arrays(FLOATS, hostile) for name in COMPACT_STREAMS},
    }
    return st.fixed_dictionaries({}, optional=fields)


def reference(node: dict[str, Any]) -> set[str]:
    """The flags' plain definition, on the node's arrays decoded."""
    node = plain(node)
    mask = node.get("mask") if isinstance(node.get("mask"), list) else None
    trained = sum(1 for item in mask or () if item is True or (type(item) in (int, float) and item == 1))
    message = node.get("message")
    role = message.get("role") if isinstance(message, dict) else None
    flags = set()
    if trained and not (node.get("sampled") and role == "assistant"):
        flags.add(TOOL_TRAINED)
    tokens = node.get("token_ids")
    if mask is not None and len(mask) != (len(tokens) if isinstance(tokens, list) else 0):
        flags.add(MISALIGNED)
    if any(isinstance(node.get(name), list) and len(node[name]) != trained for name in COMPACT_STREAMS):
        flags.add(MISALIGNED)
    return flags


@pytest.mark.slow
@settings(max_examples=400)
@given(node=nodes())
def test_a_node_is_flagged_as_its_plain_definition_says(node: dict[str, Any]) -> None:
    assert node_flags(node) == reference(node)


@pytest.mark.slow
@settings(max_examples=300)
@given(node=nodes())
def test_misaligned_is_what_the_token_view_cannot_place(node: dict[str, Any]) -> None:
    """The token view names a stream it does not place, or a mask that does not fit
    its tokens, exactly when the node is flagged misaligned."""
    findings = read_message(node).findings
    unplaceable = any(
        finding.startswith("mask has") or any(finding.startswith(f"{name} ") and "not placed" in finding for name in COMPACT_STREAMS)
        for finding in findings
    )
    assert (MISALIGNED in node_flags(node)) == unplaceable


def test_a_long_packed_mask_is_counted_in_its_bytes() -> None:
    mask = [False] * 40_000 + [True] * 3
    node = {"sampled": False, "message": {"role": "tool"}, "token_ids": Packed(msgpack.packb([7] * 40_003)), "mask": Packed(msgpack.packb(mask))}
    assert node_flags(node) == {TOOL_TRAINED}
    node["logprobs"] = Packed(msgpack.packb([-0.5] * 3))
    assert node_flags(node) == {TOOL_TRAINED}
    node["entropies"] = Packed(msgpack.packb([0.1] * 2))
    assert node_flags(node) == {TOOL_TRAINED, MISALIGNED}


KEY = "v/0"


def live_and_recorded(traces: list[list[dict[str, Any]]], directory: Path) -> tuple[frozenset[str], frozenset[str]]:
    """The rollout's flags in a store fed the deltas as the wire gives them (long arrays
    packed), and in the index of a recording of the same deltas."""
    store = RolloutStore()
    store.add_rollout("v", 0, {}, key=KEY)
    store.started(KEY, "req")
    path = directory / "flags.twrec"
    with Recorder(path, meta={}) as recorder:
        recorder.rollout(KEY, "v", 0, {}, 0, t=1.0)
        recorder.request(KEY, "req", t=1.0)
        for index, trace_nodes in enumerate(traces):
            opening = {"trace": f"t{index}", "open": {"id": f"t{index}"}}
            store.apply_delta(KEY, opening)
            recorder.delta(KEY, opening, t=2.0)
            for node in trace_nodes:
                delta = {"trace": f"t{index}", "nodes": [{**node, "semantic_parents": []}]}
                store.apply_delta(KEY, unpack_delta(pack(delta)))
                recorder.delta(KEY, delta, t=2.0)
    return store.rollouts[KEY].flags, RecordingIndex.build(path).rollouts[KEY].facts.flags


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(traces=st.lists(st.lists(nodes(hostile=False), max_size=4), min_size=1, max_size=2))
def test_a_rollout_has_the_same_flags_live_and_from_its_recording(traces: list[list[dict[str, Any]]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        live, recorded = live_and_recorded(traces, Path(directory))
    assert live == recorded == set().union(*(reference(node) for nodes_ in traces for node in nodes_))
