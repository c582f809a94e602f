"""The store's derived state on its own: the phase of a trace, phase durations and
their percentiles, what a rollout is doing and for how long, stalls, per-variant
stats, and how a rollout ends. The app and headless runner only show these."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import numpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracewatch.core.session.phases import DURATION_KEYS, percentile, phase_durations, trace_phase
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.status import Ending, Status, episode_ending
from tracewatch.core.session.store import RolloutStore


class Clock:
    """Time the test sets."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def span(start: float, end: float = 0.0) -> dict[str, float]:
    return {"start": start, "end": end}


def running(store: RolloutStore, key: str = "v/0") -> str:
    """A started rollout with one open trace."""
    rollout = store.add_rollout("v", 0, {"name": "task"}, key=key)
    store.started(rollout.key, f"req-{key}")
    store.apply_delta(rollout.key, {"trace": "t", "open": {"id": "t"}})
    return rollout.key


def test_the_phase_is_the_open_span_else_how_the_trace_ended():
    assert trace_phase({}, None, False) == "boot"
    assert trace_phase({"boot": span(1, 2), "setup": span(2)}, None, False) == "setup"
    between = {"boot": span(1, 2), "setup": span(2, 3), "agent": span(3, 4)}
    assert trace_phase(between, None, False) == "agent", "between spans: the last that ended"
    assert trace_phase(between, True, False) == "done"
    assert trace_phase(between, False, True) == "error"
    assert trace_phase({**between, "finalize": span(4)}, True, False) == "finalize", "an open span wins over ok"


def test_durations_are_finished_spans_and_the_agents_parts():
    timing = {
        "boot": span(10, 11.5),
        "setup": span(11.5, 12),
        "agent": {**span(12, 20), "model": {"duration": 5.0}, "harness": {"duration": 3.0}},
        "finalize": span(20),  # still open: no duration yet
        "scoring": span(0, 0),
    }
    assert phase_durations(timing) == {"boot": 1.5, "setup": 0.5, "agent": 8.0, "model": 5.0, "harness": 3.0}
    assert set(phase_durations(timing)) <= set(DURATION_KEYS)


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=50), st.floats(min_value=0, max_value=1))
def test_percentile_interpolates_as_numpy_does(values, q):
    values.sort()
    assert percentile(values, q) == pytest.approx(float(numpy.percentile(values, q * 100)), rel=1e-9, abs=1e-9)


def test_percentile_of_nothing_is_zero():
    assert percentile([], 0.5) == 0.0


def test_activity_generating_then_tools_then_idle():
    clock = Clock()
    store = RolloutStore(clock=clock)
    key = running(store)
    rollout = store.rollouts[key]
    assert rollout.activity(clock.now) == ("idle", 0.0)

    store.apply_delta(key, {"trace": "t", "pending": [{"role": "user", "content": "2+2?"}]}, t=101.0)
    assert rollout.activity(104.0) == ("generating", 3.0), "since the preview arrived"

    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]}
    store.apply_delta(key, {"trace": "t", "nodes": [{"sampled": True, "message": call}], "pending": []}, t=105.0)
    assert rollout.turns == 1
    assert rollout.activity(107.0) == ("tools", 2.0), "an assistant turn with tool calls: tools run"

    store.apply_delta(key, {"trace": "t", "nodes": [{"message": {"role": "tool", "content": "4"}}]}, t=108.0)
    assert rollout.activity(110.0) == ("idle", 2.0), "the tool answered: idle since that delta"

    store.finished(key, {"ok": True, "traces": [{"id": "t"}]}, t=111.0)
    assert rollout.activity(200.0) == ("done", 0.0)


def test_stalled_means_running_and_silent_longer_than_the_threshold():
    clock = Clock()
    store = RolloutStore(stall_seconds=30.0, clock=clock)
    quiet, queued = running(store, "v/quiet"), store.add_rollout("v", 1, {}, key="v/queued").key
    store.apply_delta(quiet, {"trace": "t", "set": {"x": 1}}, t=100.0)
    clock.now = 130.0
    assert store.stalled() == [], "exactly the threshold is not yet a stall"
    assert store.live_counts() == (1, 0)
    clock.now = 130.5
    assert [r.key for r in store.stalled()] == [quiet] and store.rollouts[quiet].idle(clock.now) == 30.5
    assert store.live_counts() == (1, 1)
    store.cancelling(quiet)
    assert [r.key for r in store.stalled()] == [quiet], "a cancel that gets no answer is still a stall"
    assert store.live_counts() == (0, 1), "cancelling is live but not running"
    store.failed(quiet, "gone", t=131.0)
    assert store.stalled() == [] and store.rollouts[queued].status is Status.QUEUED
    assert store.live_counts() == (0, 0)


def test_stats_count_every_status_and_take_percentiles_over_done_rollouts():
    store = RolloutStore()
    timing = {"agent": {**span(20, 22), "model": {"duration": 2.0}}}
    for index, (boot_end, reward) in enumerate([(1.0, 1.0), (2.0, 0.0), (3.0, None)]):
        key = running(store, f"v/{index}")
        scalars = {"timing": {**timing, "boot": span(10, 10 + boot_end)}}
        if reward is not None:
            scalars["rewards"] = {"correct": {"score": reward, "weight": 1.0}}
        store.apply_delta(key, {"trace": "t", "set": scalars})
        store.finished(key, {"ok": True, "traces": [{"id": "t"}]})
    failed = running(store, "v/failed")
    store.apply_delta(failed, {"trace": "t", "set": {"timing": {"boot": span(10, 110)}}})
    store.failed(failed, "provider error")
    store.failed(running(store, "v/cancelled"), "by the user", cancelled=True)
    store.add_rollout("v", 9, {}, key="v/queued")

    stats = store.stats("v")
    assert {status: count for status, count in stats.counts.items() if count} == {
        Status.DONE: 3, Status.FAILED: 1, Status.CANCELLED: 1, Status.QUEUED: 1,
    }
    assert stats.mean_reward == 0.5 and stats.scored == 2
    assert stats.phases["boot"] == (2.0, pytest.approx(2.9)), "done rollouts only: the failed 100 s boot is left out"
    assert stats.phases["agent"] == stats.phases["model"] == (2.0, 2.0) and "setup" not in stats.phases


def test_an_episode_with_trace_errors_failed_with_the_first_error():
    assert episode_ending({"ok": True, "traces": [{"id": "t", "errors": []}]}) == Ending(Status.DONE)
    failed = {"traces": [{"id": "t", "errors": [{"type": "ToolError", "message": "no such file"}]}]}
    assert episode_ending(failed) == Ending(Status.FAILED, "ToolError: no such file")
    retried = {"errors": [{"type": "Timeout", "message": "first try"}], "traces": [{"id": "t", "errors": []}]}
    assert episode_ending(retried) == Ending(Status.DONE), "a retried attempt's error in the head is not the ending"


def test_the_first_ending_wins_and_a_late_episode_is_kept():
    store = RolloutStore()
    key = running(store)
    store.failed(key, "cancelled with the variant", cancelled=True, t=5.0)
    store.finished(key, {"ok": True, "traces": [{"id": "t"}]}, t=6.0)
    rollout = store.rollouts[key]
    assert rollout.ending == Ending(Status.CANCELLED, "cancelled with the variant")
    assert rollout.ended_at == 5.0 and rollout.record == {"ok": True, "traces": [{"id": "t"}]}
    assert store.rollouts[running(store, "v/1")].ending is None, "no ending while it runs"


def test_nothing_outside_the_rollout_reaches_into_its_private_fields():
    """The store (and anything else) changes a `Rollout` through its methods (`fresh`,
    `unload`, `reload`, `counts`), never by writing the fields it keeps for itself, so
    those can change without a reader elsewhere going stale."""
    private = {f.name for f in fields(Rollout) if f.name.startswith("_")}
    assert private, "Rollout keeps no private fields: this rule has nothing to hold"
    root = Path(__file__).resolve().parents[3]
    own = root / "core" / "session" / "rollout.py"
    reaching = [
        f"{path.relative_to(root)}:{node.lineno} .{node.attr}"
        for folder in ("core", "tui", "tracewatch", "bench")
        for path in sorted((root / folder).rglob("*.py"))
        if path != own
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in private and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    ]
    assert reaching == []
