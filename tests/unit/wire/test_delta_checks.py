"""The boundary check (`tracewatch.core.wire.delta_checks`) is one fast pass that checks types
where readers look and walks for depth only what no rule names. It is held to the
straightforward check it replaced (tests/support/delta_checks_reference.py): on real
verifiers deltas mutated anywhere, at any depth, both reject exactly the same ones."""

from __future__ import annotations

import io
import math
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import delta_checks_reference as reference
from tests.support.repo import FIXTURE as RECORDED
from tracewatch.core.wire.delta_checks import MAX_DEPTH, DeltaValueError, check_delta, check_scalars
from tracewatch.core.wire.protocol import KeptItems, pack, unpack_delta

FIXTURE = RECORDED / "deltas.msgpack"


def recorded_frames() -> list[bytes]:
    """The recorded verifiers stream's frames, plus a node whose token arrays stay
    packed; each is decoded afresh (`unpack_delta`) for every example."""
    data = FIXTURE.read_bytes()
    unpacker = msgpack.Unpacker(io.BytesIO(data), raw=False, strict_map_key=False)
    frames, start = [], 0
    for _ in unpacker:
        frames.append(data[start : unpacker.tell()])
        start = unpacker.tell()
    tokens = {"parent": None, "message": {"role": "assistant", "content": "x"}, "token_ids": list(range(100)), "logprobs": [-0.5] * 100, "mask": [1] * 100}
    return [*frames, msgpack.packb({"trace": "p", "nodes": [tokens]})]


FRAMES = recorded_frames()

NAMES = st.sampled_from([
    "rewards", "timing", "agent", "tools", "score", "weight", "start", "end", "duration", "model", "harness",
    "boot", "setup", "finalize", "scoring", "message", "tool_calls", "semantic_parents", "token_ids", "logprobs",
    "routed_experts", "node", "time", "usage", "prompt_tokens", "completion_tokens", "pending", "nodes", "calls",
    "open", "set", "num_total_tokens", "num_input_tokens", "content", "x", 0, 1,
])  # fmt: skip
SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=5) | st.binary(max_size=4)
ANYTHING = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=3), max_leaves=8)


def nest(levels: int, kind: str) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value} if kind == "map" else [value]
    return value


VALUES = SCALARS | ANYTHING | st.floats(-2e12, 2e12) | st.integers(-3, 3)


def containers(value: Any, depth: int, found: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """Every dict and list inside `value` with its depth (the delta is 1)."""
    if type(value) in (dict, list):
        found.append((value, depth))
        for item in value.values() if type(value) is dict else value:
            containers(item, depth + 1, found)
    return found


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """A recorded delta with one to three changes anywhere: a value replaced or a key
    added, by a wrong-typed value, any value, or one nested to just within or just
    past `MAX_DEPTH` where it lands."""
    delta = unpack_delta(draw(st.sampled_from(FRAMES)))
    for key in ("nodes", "calls"):  # mutable, as the reference reads them; `as_received` keeps them again
        if type(delta.get(key)) is KeptItems:
            delta[key] = list(delta[key])
    for _ in range(draw(st.integers(1, 3))):
        target, depth = draw(st.sampled_from(containers(delta, 1, [])))
        if draw(st.integers(0, 3)) == 0:
            value = nest(MAX_DEPTH - depth + draw(st.integers(0, 1)), draw(st.sampled_from(["map", "list"])))
        else:
            value = draw(VALUES)
        if type(target) is dict:
            target[draw(st.sampled_from(sorted(map(str, target))) | NAMES) if target else draw(NAMES)] = value
        elif target:
            target[draw(st.integers(0, len(target) - 1))] = value
        else:
            target.append(value)
    delta["trace"] = "t"
    return delta


def rejected(check: Any, *args: Any) -> bool:
    try:
        check(*args)
    except DeltaValueError:
        return True
    return False


@settings(max_examples=2000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(delta=mutated())
def test_the_fast_check_rejects_exactly_what_the_reference_rejects(delta):
    expected = rejected(reference.check_delta, delta, "t")
    assert rejected(check_delta, delta, "t") == expected
    assert rejected(check_delta, as_received(delta), "t") == expected


def as_received(delta: dict[str, Any]) -> Any:
    """`delta` as a client decodes it off the wire: its nodes and calls with their
    bytes (`KeptItems`), its long token arrays packed."""
    return unpack_delta(pack(delta))


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(delta=mutated())
def test_a_recorded_set_is_usable_exactly_when_the_live_check_kept_it(delta):
    """The index's question (`check_scalars`) of a recorded `set` gets the live
    answer: its types, and its depth too (the live check rejected a deep set)."""
    scalars = delta.get("set")
    if type(scalars) is not dict:
        return
    live = {"trace": "t", "set": {key: value for key, value in scalars.items() if key not in reference.NOT_SCALARS}}
    assert rejected(check_scalars, live["set"], "set") == rejected(reference.check_delta, live, "t")


def test_every_recorded_delta_passes():
    for frame in FRAMES:
        check_delta(unpack_delta(frame), "t")


def test_a_repeated_value_that_passed_higher_up_is_walked_again_deeper():
    """An env's tool list is the same in every rollout, so a value equal to the last
    that passed is not walked again; but only where it had as much room."""
    tools = nest(MAX_DEPTH - 2, "list")  # in `set`: the delta, `set`, then 62 lists
    check_delta({"trace": "t", "set": {"tools": tools}}, "t")
    node = {"trace": "t", "nodes": [{"parent": None, "tools": tools}]}  # one level deeper
    assert rejected(check_delta, node, "t") and rejected(reference.check_delta, node, "t")
    check_delta({"trace": "t", "set": {"tools": tools}}, "t")
    assert rejected(check_delta, {"trace": "t", "set": {"tools": [tools]}}, "t")
    # of an agent config only what differs from the last is walked (the runtime's id)
    config = {"harness": {"id": "h"}, "model": "m"}
    check_delta({"trace": "t", "set": {"agent": {"config": config, "runtime": {"id": "a"}}}}, "t")
    check_delta({"trace": "t", "set": {"agent": {"config": config, "runtime": nest(MAX_DEPTH - 3, "map")}}}, "t")
    deep = {"trace": "t", "set": {"agent": {"config": config, "runtime": nest(MAX_DEPTH - 2, "map")}}}
    assert rejected(check_delta, deep, "t") and rejected(reference.check_delta, deep, "t")


def test_messages_say_where_the_bad_value_is():
    with pytest.raises(DeltaValueError, match=r"^trace t: set\.timing\.agent\.model\.duration must be seconds .* got float inf"):
        check_delta({"trace": "t", "set": {"timing": {"agent": {"model": {"duration": math.inf}}}}}, "t")
    with pytest.raises(DeltaValueError, match=r"^trace t: calls\[0\]\.usage\.prompt_tokens must be a finite number or null, got float nan"):
        check_delta({"trace": "t", "calls": [{"node": 0, "usage": {"prompt_tokens": math.nan}}]}, "t")
    with pytest.raises(DeltaValueError, match=rf"^trace t: nodes\[0\]\.message: values are nested deeper than {MAX_DEPTH} levels"):
        check_delta({"trace": "t", "nodes": [{"message": nest(MAX_DEPTH, "map")}]}, "t")
