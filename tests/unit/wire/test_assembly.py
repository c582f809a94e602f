"""Our EpisodeAssembly against verifiers 0.4.0's own, on a real recorded stream and on
crafted deltas for the keys that stream lacks. verifiers is the reference: the same
deltas must give exactly the same dicts."""

from __future__ import annotations

import copy
import io
import json

import msgpack
import numpy as np
import pytest
from verifiers.v1.episode import WireEpisode
from verifiers.v1.serve.delta import EpisodeAssembly as VerifiersAssembly
from verifiers.v1.serve.delta import TraceSummary

from tests.support.repo import FIXTURE
from tracewatch.core.wire.assembly import KNOWN_KEYS, AssemblyError, EpisodeAssembly
from tracewatch.core.wire.protocol import WireDelta


def recorded() -> list[tuple[str, dict]]:
    """(run label, delta) in arrival order, decoded from the wire bytes."""
    labels = [json.loads(line)["request"] for line in (FIXTURE / "deltas.jsonl").open()]
    stream = msgpack.Unpacker(
        io.BytesIO((FIXTURE / "deltas.msgpack").read_bytes()), raw=False, strict_map_key=False
    )
    deltas = list(stream)
    assert len(deltas) == len(labels)
    return list(zip(labels, deltas))


def replies() -> dict[str, dict]:
    return {r["request"]: r["reply"] for r in json.loads((FIXTURE / "replies.json").read_text()) if r["request"]}


RUNS = sorted({label for label, _ in recorded()})


def test_msgpack_and_jsonl_hold_the_same_deltas():
    jsonl = [json.loads(line)["delta"] for line in (FIXTURE / "deltas.jsonl").open()]
    assert [delta for _, delta in recorded()] == jsonl


@pytest.mark.parametrize("run", RUNS)
def test_recorded_run_assembles_exactly_as_verifiers(run):
    ours, theirs = EpisodeAssembly(), VerifiersAssembly()
    for label, delta in recorded():
        if label != run:
            continue
        touched = ours.apply(delta)
        theirs.apply(copy.deepcopy(delta))
        # the live picture (pending preview included) matches after every delta
        assert ours.traces == theirs.traces
        assert touched is ours.traces[delta["trace"]]
    assert ours.unknown == {}
    reply = replies()[run]
    if not reply["success"]:
        assert run == "cancel" and reply["error"] == "Cancelled: rollout aborted"
        (trace,) = ours.traces.values()
        assert trace["pending"], "the stuck run's last delta is the tool result's preview"
        return
    summaries = [TraceSummary.model_validate(s) for s in reply["traces"]]
    record = ours.finish(reply["head"], reply["traces"])
    assert record == theirs.finish(reply["head"], summaries)
    assert all("pending" not in trace for trace in record["traces"])
    episodes = {e["request"]: e["episode"] for e in json.loads((FIXTURE / "episodes.json").read_text())}
    assert WireEpisode.model_validate(record).model_dump(mode="json") == episodes[run]


def test_all_runs_interleaved_in_one_assembly_match_verifiers():
    ours, theirs = EpisodeAssembly(), VerifiersAssembly()
    for _, delta in recorded():
        ours.apply(delta)
        theirs.apply(delta)
    assert ours.traces == theirs.traces
    assert len(ours.traces) == len(RUNS)


# crafted streams -------------------------------------------------------------------

TRACE = "t0"


def node(index: int, role: str = "user", **extra) -> dict:
    return {
        "parent": index - 1 if index else None,
        "semantic_parents": [],
        "message": {"role": role, "content": f"message {index}"},
        "sampled": role == "assistant",
        "timestamp": 1000.0 + index,
        "token_ids": [],
        "mask": [],
        "logprobs": [],
        "routed_experts": None,
        **extra,
    }


def experts(rows: list[list[int]], dtype: str) -> dict:
    array = np.ascontiguousarray(np.array(rows, dtype=dtype))
    return {"__nd__": True, "dtype": str(array.dtype), "shape": list(array.shape), "data": array.tobytes()}


def opening(**more) -> dict:
    header = {"version": 1, "id": TRACE, "verifiers": {"version": "0.4.0", "commit": None}, "task": {"type": "T"}}
    return {"trace": TRACE, "open": header, "set": {"ok": False, "rewards": {}}, **more}


def both(deltas: list[dict]) -> tuple[EpisodeAssembly, VerifiersAssembly]:
    """Apply to ours and to verifiers' (each gets its own copy), checking after each."""
    ours, theirs = EpisodeAssembly(), VerifiersAssembly()
    for delta in deltas:
        ours.apply(copy.deepcopy(delta))
        theirs.apply(copy.deepcopy(delta))
        assert ours.traces == theirs.traces
    return ours, theirs


def test_links_with_int_and_str_node_keys():
    ours, _ = both(
        [
            opening(nodes=[node(0), node(1, "assistant"), node(2)]),
            {"trace": TRACE, "links": {2: [{"node": 0, "type": "subagent_return"}]}},
            {"trace": TRACE, "links": {"1": [{"node": 0, "type": "compaction"}], 2: [{"node": 1, "type": "x"}]}},
        ]
    )
    parents = [n["semantic_parents"] for n in ours.traces[TRACE]["nodes"]]
    assert parents == [
        [],
        [{"node": 0, "type": "compaction"}],
        [{"node": 0, "type": "subagent_return"}, {"node": 1, "type": "x"}],
    ]


def test_routing_repair_widens_dtype_as_verifiers_does():
    ours, theirs = both(
        [
            opening(nodes=[node(0, routed_experts=experts([[1, 2], [3, 4], [5, 6]], "int8"))]),
            {"trace": TRACE, "nodes": [node(1, routed_experts=experts([[7, 8]], "int8"))]},
            # the next prefill repairs node 0's final row with a value int8 cannot hold
            {"trace": TRACE, "routing_repairs": {0: experts([[300, 9]], "int16")}},
            {"trace": TRACE, "routing_repairs": {"1": experts([[10, 11]], "int8")}},
        ]
    )
    repaired = ours.traces[TRACE]["nodes"][0]["routed_experts"]
    assert repaired["dtype"] == "int16" and repaired["shape"] == [3, 2]
    decoded = np.frombuffer(repaired["data"], dtype=repaired["dtype"]).reshape(repaired["shape"])
    assert decoded.tolist() == [[1, 2], [3, 4], [300, 9]]
    summaries = [TraceSummary(id=TRACE, nodes=2, calls=0)]
    assert ours.finish({"id": "e"}, [{"id": TRACE, "nodes": 2, "calls": 0}]) == theirs.finish({"id": "e"}, summaries)


def test_discard_then_reopen_starts_the_trace_afresh():
    ours, _ = both(
        [
            opening(nodes=[node(0), node(1, "assistant")], calls=[{"node": 1}]),
            {"trace": TRACE, "discard": True},
            opening(nodes=[node(0)]),
        ]
    )
    trace = ours.traces[TRACE]
    assert len(trace["nodes"]) == 1 and trace["calls"] == []


def test_discard_of_an_unknown_trace_is_harmless():
    ours, _ = both([opening(), {"trace": "never-opened", "discard": True}])
    assert list(ours.traces) == [TRACE]


def test_extra_usage_rewrites_and_errors_append():
    ours, _ = both(
        [
            opening(extra_usage=[{"prompt_tokens": 3}], request_rewrites=[{"a": 1}]),
            {"trace": TRACE, "extra_usage": [{"prompt_tokens": 4}], "response_rewrites": [{"b": 2}]},
            {"trace": TRACE, "request_rewrites": [{"c": 3}], "errors": [{"type": "E"}]},
        ]
    )
    trace = ours.traces[TRACE]
    assert trace["extra_usage"] == [{"prompt_tokens": 3}, {"prompt_tokens": 4}]
    assert trace["request_rewrites"] == [{"a": 1}, {"c": 3}]
    assert trace["response_rewrites"] == [{"b": 2}]
    assert trace["errors"] == [{"type": "E"}]


def test_pending_is_replaced_by_an_explicit_preview_and_cleared_by_nodes():
    tool = {"role": "tool", "content": "391"}
    user = {"role": "user", "content": "go on"}
    ours, _ = both([opening(nodes=[node(0)]), {"trace": TRACE, "pending": [tool]}])
    assert ours.traces[TRACE]["pending"] == [tool]
    ours, _ = both([opening(), {"trace": TRACE, "pending": [tool]}, {"trace": TRACE, "pending": [user]}])
    assert ours.traces[TRACE]["pending"] == [user]
    ours, _ = both([opening(), {"trace": TRACE, "pending": [tool]}, {"trace": TRACE, "nodes": [node(0)]}])
    assert ours.traces[TRACE]["pending"] == []
    # nodes and a fresh preview in one delta: the preview is what stands
    ours, _ = both([opening(pending=[tool]), {"trace": TRACE, "nodes": [node(0)], "pending": [user]}])
    assert ours.traces[TRACE]["pending"] == [user]


def test_set_replaces_scalars():
    ours, _ = both([opening(), {"trace": TRACE, "set": {"ok": True, "rewards": {"r": None}}}])
    assert ours.traces[TRACE]["ok"] is True and ours.traces[TRACE]["rewards"] == {"r": None}


def test_unknown_keys_are_kept_aside_not_in_the_trace():
    assembly = EpisodeAssembly()
    assembly.apply(opening(future_key={"a": 1}))
    assembly.apply({"trace": TRACE, "future_key": {"a": 2}, "other": [1]})
    assert assembly.unknown == {TRACE: {"future_key": {"a": 2}, "other": [1]}}
    assert "future_key" not in assembly.traces[TRACE] and "other" not in assembly.traces[TRACE]
    record = assembly.finish({"id": "e"}, [{"id": TRACE, "nodes": 0, "calls": 0}])
    assert "future_key" not in record["traces"][0]


def test_a_received_delta_is_never_mutated_later():
    stream = [
        opening(nodes=[node(0, routed_experts=experts([[1, 2], [3, 4]], "int8")), node(1, "assistant")]),
        {"trace": TRACE, "nodes": [node(2, semantic_parents=[{"node": 0, "type": "a"}])], "pending": [{"role": "tool"}]},
        {"trace": TRACE, "links": {0: [{"node": 1, "type": "b"}], 2: [{"node": 1, "type": "c"}]}},
        {"trace": TRACE, "routing_repairs": {0: experts([[500, 6]], "int16")}},
        {"trace": TRACE, "links": {"2": [{"node": 0, "type": "d"}]}, "set": {"ok": True}},
    ]
    assembly = EpisodeAssembly()
    received = []
    for delta in stream:
        assembly.apply(delta)
        received.append((delta, copy.deepcopy(delta)))
    for delta, on_receipt in received:
        assert delta == on_receipt
    assert assembly.traces[TRACE]["nodes"][2]["semantic_parents"] == [
        {"node": 0, "type": "a"},
        {"node": 1, "type": "c"},
        {"node": 0, "type": "d"},
    ]


def test_finish_count_mismatch_names_the_trace_and_both_counts():
    assembly = EpisodeAssembly()
    assembly.apply(opening(nodes=[node(0), node(1, "assistant")], calls=[{"node": 1}]))
    with pytest.raises(AssemblyError) as error:
        assembly.finish({"id": "e"}, [{"id": TRACE, "nodes": 3, "calls": 1}])
    message = str(error.value)
    assert TRACE in message and "2 nodes / 1 calls" in message and "3 / 1" in message
    with pytest.raises(AssemblyError, match="missing trace gone"):
        assembly.finish({"id": "e"}, [{"id": "gone", "nodes": 0, "calls": 0}])


def test_finish_accepts_verifiers_summaries_and_keeps_server_order():
    assembly = EpisodeAssembly()
    for trace_id in ("a", "b"):
        assembly.apply({**opening(), "trace": trace_id})
    record = assembly.finish({"id": "e"}, [TraceSummary(id="b", nodes=0, calls=0), TraceSummary(id="a", nodes=0, calls=0)])
    assert [t["id"] for t in record["traces"]] == [TRACE, TRACE]  # header ids, from `open`
    assert record["id"] == "e"


BAD_DELTAS = [
    pytest.param({"trace": "unopened", "nodes": [node(0)]}, "never opened", id="unknown-trace-without-open"),
    pytest.param({"trace": TRACE, "links": {5: [{"node": 0, "type": "a"}]}}, "names node 5", id="link-to-missing-node"),
    pytest.param({"trace": TRACE, "links": {"x": []}}, "non-integer", id="link-non-int-key"),
    pytest.param({"trace": TRACE, "links": {0: "ab"}}, "must be a list", id="link-not-a-list"),
    pytest.param({"trace": TRACE, "routing_repairs": {1: experts([[1]], "int8")}}, "routing repair", id="repair-node-without-experts"),
    pytest.param({"trace": TRACE, "nodes": [node(2), "not a node"]}, "non-map", id="node-not-a-map"),
    pytest.param({"trace": TRACE, "nodes": [node(2)], "calls": 7}, "'calls' must be a list", id="calls-not-a-list"),
    pytest.param({"trace": TRACE, "nodes": [node(2)], "set": [1]}, "'set' must be a map", id="set-not-a-map"),
    pytest.param({"nodes": []}, "no 'trace' id", id="no-trace-id"),
    pytest.param([1, 2], "must be a map", id="not-a-map"),
]


@pytest.mark.parametrize(("bad", "reason"), BAD_DELTAS)
def test_a_bad_delta_raises_and_leaves_the_assembly_exactly_as_it_was(bad, reason):
    assembly = EpisodeAssembly()
    assembly.apply(opening(nodes=[node(0, routed_experts=experts([[1, 2]], "int8")), node(1, "assistant")]))
    assembly.apply({"trace": TRACE, "pending": [{"role": "tool", "content": "x"}], "extra": 1})
    before = copy.deepcopy((assembly.traces, assembly.unknown))
    with pytest.raises(AssemblyError, match=reason):
        assembly.apply(bad)
    assert (assembly.traces, assembly.unknown) == before
    # and the assembly goes on
    assembly.apply({"trace": TRACE, "nodes": [node(2)]})
    assert len(assembly.traces[TRACE]["nodes"]) == 3


def test_the_delta_shape_names_every_key_the_assembly_reads():
    """`WireDelta`, the type every source passes a delta as, and the assembly's own list
    of the keys it knows are one list: a key added to one is added to the other."""
    assert set(WireDelta.__annotations__) == KNOWN_KEYS
