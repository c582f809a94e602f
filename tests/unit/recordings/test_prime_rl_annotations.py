"""Annotations: the scalars every trace gets from the producers' indexes (without
reading a stream), folded newest-wins in producer-name then write order; and the
streams placed on an opened trace's nodes through each node's mask, as prime-rl folds them."""

from __future__ import annotations

import copy

import pytest

from tests.support.prime_rl_monitor import FileMonitor, make_update, traces_dir
from tracewatch.core.recordings.prime_rl.annotations import Annotations, branch_paths, fold_updates

T = "5be1d0c2a4f04c3d9d1e7a7f0c6b2e11"


def trace(*nodes):
    return {"id": T, "info": {"kind": "train"}, "nodes": [dict(node) if isinstance(node, dict) else node for node in nodes]}


ROOT = {"token_ids": [1, 2, 3], "mask": [False, False, False]}
REPLY = {"parent": 0, "token_ids": [4, 5, 6], "mask": [False, True, True]}


def test_the_spec_s_worked_example():
    folded = trace(ROOT, REPLY)
    fold_updates(folded, [make_update(T, branches={0: {"trainer_logprobs": [None, None, None, None, -0.0103, -0.1987]}})])
    assert "trainer_logprobs" not in folded["nodes"][0]
    assert folded["nodes"][1]["trainer_logprobs"] == [-0.0103, -0.1987]


def test_a_short_stream_leaves_the_tail_and_a_null_leaves_a_node_but_partial_streams_keep_theirs():
    folded = trace(ROOT, REPLY, {"parent": 1, "token_ids": [7, 8], "mask": [True, True]})
    stream = {"entropies": [0.0] * 4 + [0.5, None], "advantages": [0.0] * 4 + [1.0, 1.0, 1.0], "is_masked": [None] * 4 + [None, False, True, None], "mismatch_kl": [None] * 6 + [None, None]}
    fold_updates(folded, [make_update(T, branches={0: stream})])
    reply, tail = folded["nodes"][1], folded["nodes"][2]
    assert "entropies" not in reply, "a null at a sampled position: not fully known"
    assert reply["advantages"] == [1.0, 1.0] and "advantages" not in tail, "the stream ends inside the tail"
    assert reply["is_masked"] == [None, False], "a partial stream keeps its nulls"
    assert tail["is_masked"] == [True, None] and "mismatch_kl" not in tail, "but needs one known value"


def test_each_branch_of_a_fork_lands_on_its_own_path_and_bad_indexes_are_skipped():
    other = {"parent": 0, "token_ids": [9, 9], "mask": [True, True]}
    folded = trace(ROOT, REPLY, other)
    assert branch_paths(folded["nodes"]) == [[0, 1], [0, 2]]
    updates = [make_update(T, branches={1: {"trainer_logprobs": [None] * 3 + [-2.0, -3.0]}, 0: {"trainer_logprobs": [None] * 4 + [-1.0, -1.5]}, 7: {"trainer_logprobs": [1.0]}})]
    updates[0]["branches"].append({"index": "0", "trainer_logprobs": [5.0] * 6})
    fold_updates(folded, updates)
    assert folded["nodes"][1]["trainer_logprobs"] == [-1.0, -1.5] and folded["nodes"][2]["trainer_logprobs"] == [-2.0, -3.0]


def test_info_merges_deeply_newest_wins_and_hostile_shapes_change_nothing():
    folded = trace(ROOT, REPLY)
    fold_updates(folded, [
        make_update(T, info={"ship": {"step": 3, "time": 1.0}, "effective": True}),
        make_update(T, info={"ship": {"step": 4}, "qorl_advantage": 0.2}),
        {"info": "x", "branches": {"index": 0}},
        {"branches": [None, {"index": 0, "advantages": "abc"}, {"index": 0, "advantages": [1] * 99}]},
    ])
    assert folded["info"] == {"kind": "train", "ship": {"step": 4, "time": 1.0}, "effective": True, "qorl_advantage": 0.2}
    assert folded["nodes"][1]["advantages"] == [1, 1]
    cyclic = trace({"parent": 1, "token_ids": [1], "mask": [True]}, {"parent": 0, "token_ids": [2], "mask": [True]}, "not a node")
    before = copy.deepcopy(cyclic)
    fold_updates(cyclic, [make_update(T, branches={0: {"advantages": [1.0, 2.0]}})])
    assert cyclic["nodes"][2] == before["nodes"][2]


@pytest.fixture
def annotated(tmp_path):
    out = tmp_path / "out"
    trainer, orchestrator = FileMonitor(out, "trainer", chunk_bytes=300), FileMonitor(out, "orchestrator", chunk_bytes=300)
    return out, trainer, orchestrator, Annotations(traces_dir(out) / "annotations")


def test_scalars_come_from_the_indexes_alone_and_follow_producer_then_write_order(annotated):
    out, trainer, orchestrator, notes = annotated
    trainer.log_annotations([make_update(T, info={"advantage": 9.0})])
    orchestrator.log_annotations([make_update(T, info={"effective": True, "ship": {"step": 2, "time": 5.0}, "advantage": 0.5})])
    orchestrator.log_annotations([make_update(T, info={"ship": {"step": 3, "time": 6.0}, "extra": {"a": 1}}), make_update("0" * 32, info={"effective": False})])
    for monitor in (trainer, orchestrator):
        monitor.finalize()
    annotations = traces_dir(out) / "annotations"
    slots = notes.read_on(200)
    while not notes.caught_up:
        slots = notes.read_on(200)
    for chunk in [*annotations.glob("*/*.zst")]:
        chunk.unlink()  # the scalars never read a stream
    got = notes.scalars(T)
    assert (got.effective, got.ship_step, got.advantage) == (True, 3, 9.0), "the trainer sorts after the orchestrator: its advantage wins"
    assert got.info == {"effective": True, "ship": {"step": 3}, "advantage": 9.0, "extra": {"a": 1}}
    assert notes.scalars("0" * 32).effective is False and notes.scalars("f" * 32) is None
    assert len(slots) >= 0 and notes.updates == 4


def test_updates_are_read_in_fold_order_and_a_vanished_chunk_is_a_reason(annotated):
    out, trainer, orchestrator, notes = annotated
    orchestrator.log_annotations([make_update(T, info={"n": 1}), make_update(T, info={"n": 2})])
    trainer.log_annotations([make_update(T, info={"n": 3})])
    notes.read_on()
    updates, problems = notes.updates_for(T)
    assert [u["info"]["n"] for u in updates] == [1, 2, 3] and problems == []
    for chunk in (traces_dir(out) / "annotations" / "trainer").iterdir():
        chunk.unlink()
    updates, problems = notes.updates_for(T)
    assert [u["info"]["n"] for u in updates] == [1, 2] and "is gone" in problems[0]
