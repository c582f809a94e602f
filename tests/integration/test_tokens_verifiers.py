"""Our placement of a node's compact streams is verifiers 0.4.0's own: nodes built and
validated as verifiers `MessageNode`s, dumped as its server sends them, read back packed
as our store keeps them, place every stream where verifiers' `Branch.spread` does
(generated nodes, hypothesis), masks of any shape included."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from verifiers.v1.graph import MessageNode
from verifiers.v1.trace import Branch

from tracewatch.core.tokens.streams import read_message
from tracewatch.core.wire.packed_list import pack_node
from tracewatch.core.wire.protocol import pack, unpack, unpack_node

FLOATS = st.floats(-30.0, 0.0, allow_nan=False)


@st.composite
def message_nodes(draw: st.DrawFn) -> MessageNode:
    mask = draw(st.lists(st.booleans(), min_size=1, max_size=60))
    trained = sum(mask)

    def compact() -> list[float]:
        return draw(st.lists(FLOATS, min_size=trained, max_size=trained))

    return MessageNode.model_validate({
        "message": {"role": "assistant", "content": "x"}, "sampled": bool(trained),
        "token_ids": draw(st.lists(st.integers(0, 150_000), min_size=len(mask), max_size=len(mask))),
        "mask": mask, "is_content": draw(st.lists(st.booleans(), min_size=len(mask), max_size=len(mask))),
        "logprobs": compact(), "advantages": compact(), "trainer_logprobs": compact(),
        "reference_logprobs": compact(), "entropies": compact() if draw(st.booleans()) else None,
        "loss_weights": {"echo": draw(st.lists(FLOATS, min_size=len(mask), max_size=len(mask)))},
    })


def as_the_wire_sends(node: MessageNode) -> dict:
    """The node as a verifiers server dumps it into a delta, then as our store keeps it
    (long arrays packed)."""
    dumped = unpack(pack(node.model_dump()))
    return unpack_node(pack_node(dumped))


@settings(max_examples=200)
@given(nodes=st.lists(message_nodes(), min_size=1, max_size=4))
def test_streams_land_where_verifiers_spreads_them(nodes: list[MessageNode]) -> None:
    branch = Branch(index=0, nodes=nodes)
    ours = [read_message(as_the_wire_sends(node)) for node in nodes]
    assert all(tokens.findings == () for tokens in ours)
    assert [int(i) for tokens in ours for i in tokens.ids] == branch.token_ids
    assert [bool(m) for tokens in ours for m in tokens.mask] == branch.sampled_mask
    for name in ("logprobs", "advantages", "trainer_logprobs", "reference_logprobs", "entropies"):
        theirs = getattr(branch, name)
        if theirs is None:
            assert all(name not in tokens.compact for tokens in ours)
            continue
        placed = np.concatenate([np.nan_to_num(tokens.compact[name], nan=0.0) if name in tokens.compact
                                 else np.zeros(len(tokens)) for tokens in ours])
        assert all(math.isclose(a, b, abs_tol=1e-12) for a, b in zip(placed.tolist(), theirs, strict=True))
    echo = np.concatenate([tokens.loss_weights["echo"] for tokens in ours])
    assert echo.tolist() == branch.loss_weights("echo")
