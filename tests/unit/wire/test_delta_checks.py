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
from tests.support.hostile_values import WIRE, mutate, nest
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

@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """A recorded delta with one to three changes anywhere (`hostile_values.mutate`)."""
    delta = unpack_delta(draw(st.sampled_from(FRAMES)))
    for key in ("nodes", "calls"):  # mutable, as the reference reads them; `as_received` keeps them again
        if type(delta.get(key)) is KeptItems:
            delta[key] = list(delta[key])
    for _ in range(draw(st.integers(1, 3))):
        mutate(draw, delta, 1, WIRE)
    delta["trace"] = "t"
    return delta


def rejected(check: Any, *args: Any) -> bool:
    try:
        check(*args)
    except DeltaValueError:
        return True
    return False


@pytest.mark.slow
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


@pytest.mark.slow
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
