"""A run request's payload, its shared fields packed once, is byte for byte what
pydantic's `RunRequest` dump gives, for any task and as the shared fields change."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracewatch.core.wire.protocol import ClientConfig, RunRequest, SamplingConfig, request_payload
from tracewatch.core.wire.run_payload import RunPayloads

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(),  # nan and the infinities too: pydantic's JSON dump writes them as None
    st.text(max_size=8),
    st.binary(max_size=4),  # dumped as text, or refused as pydantic refuses it
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),  # dumped as a list
        st.dictionaries(st.text(max_size=4), inner, max_size=3),
        st.dictionaries(st.integers(0, 9), inner, max_size=2),  # keys dumped as text
    ),
    max_leaves=12,
)
TASKS = st.dictionaries(st.text(max_size=6), VALUES, max_size=5)
CLIENTS = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"base_url": st.sampled_from(["http://127.0.0.1:9/v1", "http://a/v1"])}),
    st.builds(ClientConfig, api_key_var=st.sampled_from(["A", "B"]), headers=st.dictionaries(st.sampled_from("xy"), st.text(max_size=3), max_size=2)),
)
SAMPLINGS = st.one_of(st.none(), st.just({}), st.builds(SamplingConfig, temperature=st.none() | st.floats(0, 2), max_tokens=st.none() | st.integers(1, 9)))
RUNS = st.lists(st.tuples(TASKS, CLIENTS, st.sampled_from(["m", "n"]), SAMPLINGS), min_size=1, max_size=6)


def outcome(payload: Callable[..., bytes], *run: object) -> bytes | type[BaseException]:
    try:
        return payload(*run)
    except Exception as error:
        return type(error)


def pydantic_payload(task: dict, client: object, model: str, sampling: object) -> bytes:
    request = RunRequest(
        task_data=task,
        client=ClientConfig.model_validate(client),
        model=model,
        sampling=SamplingConfig.model_validate(sampling or {}),
    )
    return request_payload(request)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(RUNS)
def test_every_run_packs_as_pydantic_dumps_it(runs):
    payloads = RunPayloads()
    for run in runs:
        assert outcome(payloads.payload, *run) == outcome(pydantic_payload, *run)


def test_a_client_changed_in_place_after_a_run_is_sent_as_it_now_is():
    payloads, client = RunPayloads(), {"base_url": "http://127.0.0.1:9/v1", "headers": {"x": "1"}}
    task = {"prompt": "p", "answer": 1.5}
    first = payloads.payload(task, client, "m", None)
    client["headers"]["x"] = "2"
    assert payloads.payload(task, client, "m", None) == pydantic_payload(task, client, "m", None) != first


def test_a_float_that_is_not_finite_is_dumped_as_pydantic_dumps_it():
    payloads = RunPayloads()
    for value in (math.nan, math.inf, -math.inf, 0.5):
        task = {"x": [value]}
        assert payloads.payload(task, {}, "m", None) == pydantic_payload(task, {}, "m", None)


EQUAL_BUT_PACKED_APART = st.sampled_from([1, 1.0, True, 0, 0.0, -0.0, False])
"""Values `==` holds equal that msgpack packs apart (an int, a float, a bool; 0.0 and -0.0)."""
SHARED_TWINS = st.lists(
    st.tuples(
        st.dictionaries(st.sampled_from(["x", "y", "z"]), st.text(max_size=1), max_size=3),  # headers, in any order
        st.dictionaries(st.sampled_from(["temperature", "seed", "n"]), EQUAL_BUT_PACKED_APART, max_size=3),
    ),
    min_size=2,
    max_size=6,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(SHARED_TWINS)
def test_shared_fields_equal_to_the_last_but_packed_apart_are_packed_again(runs):
    """A client's or sampling's fields that compare equal to the last run's can still
    dump to other bytes: 1, 1.0 and True; 0.0 and -0.0; the same keys in another order."""
    payloads, task = RunPayloads(), {"prompt": "p"}
    for headers, sampling in runs:
        client = {"headers": headers, "extra": dict(sampling)}
        assert outcome(payloads.payload, task, client, "m", sampling) == outcome(pydantic_payload, task, client, "m", sampling)
