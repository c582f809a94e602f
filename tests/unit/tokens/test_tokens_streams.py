"""A message's streams placed on its tokens: checked against a plain reference mapping
on generated nodes (hypothesis), read as the store gives them (long arrays packed) and
as plain lists; lengths that disagree and hostile values are findings, never a crash
or a shifted stream."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracewatch.core.tokens.streams import COMPACT_STREAMS, NO_ID, read_message, streams_of, token_values
from tracewatch.core.tokens.summary import summarize
from tracewatch.core.wire.packed_list import pack_node
from tracewatch.core.wire.protocol import unpack_node

VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**63), 2**64 - 1))
"""msgpack holds integers in this range; larger ones are the plain-list test's."""
HOSTILE = st.one_of(VALUES, st.none(), st.text(max_size=3), st.booleans(), st.lists(st.integers(-5, 5), max_size=2))


@st.composite
def nodes(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(0, 80))
    node: dict[str, Any] = {"token_ids": draw(st.lists(st.integers(0, 200_000), min_size=count, max_size=count))}
    mask_length = draw(st.sampled_from([count, count, count, max(0, count - 1), count + 2]))
    node["mask"] = draw(st.lists(st.booleans(), min_size=mask_length, max_size=mask_length))
    trained = sum(node["mask"])
    for name in COMPACT_STREAMS:
        size = draw(st.sampled_from([trained, trained, trained, max(0, trained - 1), trained + 1, None]))
        if size is not None:
            items = VALUES if draw(st.booleans()) else HOSTILE
            node[name] = draw(st.lists(items, min_size=size, max_size=size))
    if draw(st.booleans()):
        names = draw(st.lists(st.text(max_size=4), max_size=3, unique=True))
        node["loss_weights"] = {
            name: draw(st.lists(VALUES, min_size=size, max_size=size))
            for name in names
            for size in [draw(st.sampled_from([count, count, count + 1]))]
        }
    return node


def reference(node: dict[str, Any], name: str) -> list[Any] | None:
    """A compact stream placed by hand: the i-th value on the i-th trained token, or
    None when the stream cannot be placed (absent, or a length that disagrees)."""
    values, mask = node.get(name), node["mask"]
    if values is None or len(mask) != len(node["token_ids"]) or len(values) != sum(mask):
        return None
    given = iter(values)
    return [next(given) if trained else None for trained in mask]


def as_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.nan


def same(left: float, right: float) -> bool:
    return (math.isnan(left) and math.isnan(right)) or left == right


@pytest.mark.slow
@settings(max_examples=300)
@given(node=nodes(), packed=st.booleans())
def test_every_stream_lands_where_the_reference_puts_it(node: dict[str, Any], packed: bool) -> None:
    tokens = read_message(unpack_node(pack_node(node)) if packed else node)
    assert list(tokens.ids) == node["token_ids"]
    for name in COMPACT_STREAMS:
        expected = reference(node, name)
        if expected is None:
            assert name not in tokens.compact
            if name in node:
                assert any(finding.startswith(name) for finding in tokens.findings), tokens.findings
            continue
        if not node["token_ids"]:
            continue
        placed = tokens.compact[name]
        assert len(placed) == len(node["token_ids"])
        for value, want in zip(placed, expected):
            assert same(float(value), math.nan if want is None else as_float(want))
        hostile = sum(1 for item in node[name] if math.isnan(as_float(item)) or math.isinf(as_float(item)))
        if hostile:
            assert any(finding.startswith(name) for finding in tokens.findings)
    for name, weights in (node.get("loss_weights") or {}).items():
        if len(weights) == len(node["token_ids"]):
            assert all(same(float(a), as_float(b)) for a, b in zip(tokens.loss_weights[name], weights, strict=True))
        else:
            assert name not in tokens.loss_weights
            assert any(f"loss_weights[{name}]" in finding for finding in tokens.findings)
    summary = summarize(tokens)  # never raises, whatever the values
    assert summary.tokens == len(node["token_ids"])
    for stream in streams_of(tokens):
        values = stream.values(tokens)
        assert values is None or len(values) == len(tokens)
    for index in range(len(tokens)):
        assert token_values(tokens, index)["id"] == node["token_ids"][index]


@pytest.mark.slow
@settings(max_examples=200)
@given(node=st.dictionaries(st.sampled_from(["token_ids", "mask", "is_content", *COMPACT_STREAMS, "loss_weights"]),
                            st.one_of(HOSTILE, st.lists(HOSTILE, max_size=20), st.dictionaries(HOSTILE.filter(lambda v: v is not None and not isinstance(v, list)), st.lists(HOSTILE, max_size=5), max_size=2))))
def test_any_node_reads_without_raising(node: dict[str, Any]) -> None:
    tokens = read_message(node)
    summarize(tokens)
    for index in range(len(tokens)):
        token_values(tokens, index)


def test_a_length_that_disagrees_is_named_and_nothing_is_shifted() -> None:
    tokens = read_message({
        "token_ids": [1, 2, 3, 4, 5], "mask": [False, False, True, True, True],
        "logprobs": [-0.5, -1.0], "entropies": [0.1, 0.2, 0.3],
    })
    assert "logprobs" not in tokens.compact
    assert "logprobs has 2 values for 3 trained tokens: not placed" in tokens.findings
    assert list(tokens.compact["entropies"][2:]) == [0.1, 0.2, 0.3]
    assert np.isnan(tokens.compact["entropies"][:2]).all()
    short_mask = read_message({"token_ids": [1, 2, 3], "mask": [True, True], "logprobs": [-1.0, -1.0]})
    assert "mask has 2 flags for 3 tokens" in short_mask.findings
    assert "logprobs not placed: the mask does not fit the tokens" in short_mask.findings


def test_hostile_values_are_counted_and_kept_out_of_the_figures() -> None:
    tokens = read_message({
        "token_ids": [7, "eight", 2**80, 9], "mask": [True, True, True, "yes"],
        "is_content": [True, True, False, True],
        "logprobs": [float("nan"), -2.0, "x"], "trainer_logprobs": [-0.5, float("inf"), -0.1],
    })
    assert list(tokens.ids) == [7, NO_ID, NO_ID, 9]
    assert tokens.trained == 3
    assert "token_ids: 2 of 4 are not token ids (shown as -1)" in tokens.findings
    assert "mask: 1 of 4 are not true or false (read as false)" in tokens.findings
    assert "logprobs: 1 of 3 values are not numbers (shown as missing)" in tokens.findings
    assert "logprobs: 1 of 3 values are NaN or infinite" in tokens.findings
    summary = summarize(tokens)
    assert summary.mean_logprob == -2.0
    assert summary.lowest_logprob is not None and (summary.lowest_logprob.value, summary.lowest_logprob.index) == (-2.0, 1)
    assert summary.worst_mismatch is None or math.isfinite(summary.worst_mismatch.value)
    assert summary.content == 3


def test_a_summary_finds_the_worst_mismatch_and_the_lowest_logprob() -> None:
    tokens = read_message({
        "token_ids": list(range(6)), "mask": [False, True, True, True, False, True],
        "logprobs": [-0.1, -3.0, -0.2, -0.4], "trainer_logprobs": [-0.1, -3.1, -1.7, -0.4],
        "advantages": [0.5] * 4, "loss_weights": {"echo": [0, 1, 1, 1, 0, 1]},
    })
    summary = summarize(tokens)
    assert (summary.tokens, summary.trained, summary.content) == (6, 4, None)
    assert summary.lowest_logprob is not None and summary.lowest_logprob.index == 2
    assert summary.worst_mismatch is not None and summary.worst_mismatch.index == 3
    assert math.isclose(summary.worst_mismatch.value, -1.5)
    assert [s.key for s in streams_of(tokens)][-1] == "loss:echo"
    values = token_values(tokens, 3)
    assert math.isclose(values.pop("mismatch"), -1.5)
    assert values == {
        "index": 3, "id": 3, "mask": True, "is_content": None, "logprobs": -0.2, "advantages": 0.5,
        "reference_logprobs": None, "trainer_logprobs": -1.7, "entropies": None, "loss_weights[echo]": 1.0,
        "is_masked": None,
    }
    assert token_values(tokens, 0)["logprobs"] is None


def test_a_million_tokens_read_packed() -> None:
    count = 1_000_000
    node = {"token_ids": list(range(count)), "mask": [index % 2 == 0 for index in range(count)],
            "logprobs": [-0.25] * (count // 2 - 1)}
    tokens = read_message(unpack_node(pack_node(node)))
    assert len(tokens) == count and tokens.trained == count // 2
    assert f"logprobs has {count // 2 - 1} values for {count // 2} trained tokens: not placed" in tokens.findings


def test_infinite_logprobs_on_both_sides_summarize_without_a_warning() -> None:
    """inf - inf is NaN, kept out of the worst mismatch: an expected value of hostile
    input, not a RuntimeWarning on the stderr of `tracewatch tokens` or the app."""
    tokens = read_message({
        "token_ids": [1, 2, 3], "mask": [True, True, True],
        "logprobs": [float("-inf"), -1.0, -2.0], "trainer_logprobs": [float("-inf"), -1.5, -2.0],
    })
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = summarize(tokens)
    assert summary.worst_mismatch is not None and (summary.worst_mismatch.value, summary.worst_mismatch.index) == (-0.5, 1)
