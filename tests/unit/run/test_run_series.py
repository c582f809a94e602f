"""The run's series on their own: bucketed counts of waiting, running and ended
rollouts checked against a plain count over every rollout, however the events arrive
and however often a rollout is read again; and the store feeding them, with each
rollout's times kept after its traces leave memory."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracewatch.core.run.series import Occupancy, Outcome, RunSeries, agent_bin, bin_seconds
from tracewatch.core.run.times import times_of
from tracewatch.core.session.status import Ending, Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.taps.observed import ObservedRuns

T0 = 1_700_000_000.0


@st.composite
def rollouts(draw: st.DrawFn) -> tuple[Occupancy, Outcome | None]:
    queued = T0 + draw(st.integers(0, 400))
    started = queued + draw(st.integers(0, 100)) if draw(st.booleans()) else None
    ended = (started or queued) + draw(st.integers(0, 300)) if draw(st.booleans()) else None
    outcome = None
    if ended is not None:
        status = draw(st.sampled_from(["done", "failed", "cancelled"] if started else ["cancelled"]))
        reward = draw(st.none() | st.integers(0, 4).map(lambda n: n / 4))
        outcome = Outcome(ended, status, reward, draw(st.integers(0, 10_000)), float(ended - started) if started else None)
    return Occupancy(queued, started, ended), outcome


@pytest.mark.slow
@given(
    st.lists(rollouts(), max_size=40),
    st.randoms(use_true_random=False),
    st.lists(st.integers(0, 39), max_size=10),
)
def test_buckets_count_what_a_plain_count_over_every_rollout_says(runs, rng, again):
    """Fed in any order, some rollouts taken back and counted again (a recording's
    rollout loaded on demand), coarsened past a small bucket limit: each bucket's
    counts and each column's levels equal a count over all rollouts at that grid."""
    series = RunSeries(width=1.0, max_buckets=16)
    order = list(runs)
    rng.shuffle(order)
    for occupancy, outcome in order:
        series.occupancy("v", None, Occupancy(occupancy.queued, None, None))
        series.occupancy("v", Occupancy(occupancy.queued, None, None), occupancy)
        series.outcome("v", None, outcome)
    for index in again:
        if index < len(runs):
            occupancy, outcome = runs[index]
            series.occupancy("v", occupancy, Occupancy(occupancy.queued, None, None))
            series.outcome("v", outcome, None)
            series.occupancy("v", Occupancy(occupancy.queued, None, None), occupancy)
            series.outcome("v", None, outcome)
    if not runs:
        assert series.count == 0
        return
    assert series.count <= 16
    origin, width = series.origin, series.width
    columns = series.columns("v", origin, origin + series.count * width, series.count)

    def bucket(t: float) -> int:
        return math.floor((t - origin) / width)

    for index, column in enumerate(columns):
        ended = [o for _, o in runs if o is not None and bucket(o.t) == index]
        assert column.sums.ended == len(ended)
        assert column.sums.failed == sum(o.status == "failed" for o in ended)
        assert column.sums.tokens == sum(o.tokens for o in ended)
        assert column.sums.rewarded == sum(o.reward is not None for o in ended)
        assert math.isclose(column.sums.reward_sum, sum(o.reward or 0.0 for o in ended), abs_tol=1e-9)
        assert sum(column.sums.agent.values()) == sum(o.status == "done" and o.agent_seconds is not None for o in ended)
        waiting = sum(
            bucket(q) <= index and not ((left := s if s is not None else e) is not None and bucket(left) <= index)
            for (q, s, e), _ in runs
        )
        running = sum(s is not None and bucket(s) <= index and not (e is not None and bucket(e) <= index) for (q, s, e), _ in runs)
        assert (column.waiting, column.running) == (waiting, running), index


def test_columns_wider_than_buckets_merge_them_and_keep_levels_from_before_the_view():
    series = RunSeries(width=1.0)
    for i in range(10):
        series.occupancy("v", None, Occupancy(T0 + i, T0 + i + 1, T0 + i + 5))
        series.outcome("v", None, Outcome(T0 + i + 5, "done", float(i % 2), 100, 4.0))
    whole = series.columns("v", T0, T0 + 20, 4)
    assert [c.sums.ended for c in whole] == [0, 5, 5, 0]
    assert [c.per_minute for c in whole] == [0.0, 60.0, 60.0, 0.0]
    assert [c.sums.mean_reward for c in whole] == [None, 0.4, 0.6, None]
    late = series.columns("v", T0 + 10, T0 + 12, 2)
    assert [(c.waiting, c.running) for c in late] == [(0, 4), (0, 3)], "levels count what started before the view"
    assert series.columns("other", T0, T0 + 20, 4)[0].sums.ended == 0


def test_the_agent_median_is_read_within_its_bin():
    series = RunSeries()
    for seconds in (1.0, 2.0, 30.0):
        series.outcome("v", None, Outcome(T0, "done", None, 0, seconds))
    (column,) = series.columns("v", T0, T0 + 1, 1)
    assert abs(column.sums.p50_agent - 2.0) / 2.0 < 0.05
    assert abs(bin_seconds(agent_bin(75.0)) - 75.0) / 75.0 < 0.05


def test_hostile_times_are_left_out_not_drawn():
    series = RunSeries()
    series.occupancy("v", None, Occupancy(float("nan"), -5.0, 1e30))
    series.outcome("v", None, Outcome(float("inf"), "done", 1.0, 1, 1.0))
    assert series.count == 0
    assert times_of({"boot": {"start": float("nan"), "end": 1e40}, "agent": "x"}).spans == ()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def timed_trace(start: float) -> dict:
    timing = {
        "boot": {"start": start, "end": start + 1},
        "setup": {"start": start + 1, "end": start + 2},
        "agent": {"start": start + 2, "end": start + 10, "model": {"duration": 6.0}, "harness": {"duration": 2.0}},
        "finalize": {"start": start + 10, "end": start + 11},
        "scoring": {"start": start + 11, "end": start + 12},
    }
    return {
        "trace": "t",
        "open": {"id": "t"},
        "nodes": [{"message": {"role": "user"}}, {"message": {"role": "assistant"}, "sampled": True}],
        "calls": [{"node": 1, "time": {"start": start + 2, "end": start + 8}}],
        "set": {"timing": timing, "rewards": {"r": {"score": 0.5, "weight": 1.0}}, "num_total_tokens": 700, "ok": True},
    }


def test_the_store_counts_each_rollout_once_and_keeps_its_times_when_its_traces_leave():
    clock = Clock()
    store = RolloutStore(clock=clock)
    rollout = store.add_rollout("v", 0, {}, key="v/0")
    clock.now = T0 + 3
    store.started("v/0", "r")
    store.apply_delta("v/0", timed_trace(T0 + 4))
    times = rollout.times
    assert [s.phase for s in times.spans] == ["boot", "setup", "agent", "finalize", "scoring"]
    assert (times.model, times.harness, times.agent_seconds) == (6.0, 2.0, 8.0)
    assert list(times.call_intervals()) == [(T0 + 6, T0 + 12)]
    clock.now = T0 + 17
    store.finished("v/0", {"traces": [{"errors": []}]})
    store.unload("v/0")
    assert not rollout.traces and rollout.times == times, "kept when the traces left"

    (column,) = store.series.columns("v", T0, T0 + 20, 1)
    assert (column.sums.done, column.sums.reward_sum, column.sums.tokens, column.waiting, column.running) == (1, 0.5, 700, 0, 0)

    # read again from its records, as an opened recording loads it: counted once
    store.reset_rollout("v/0")
    store.started("v/0", "r", T0 + 3)
    store.apply_delta("v/0", timed_trace(T0 + 4), T0 + 4)
    store.ended("v/0", Ending(Status.DONE), t=T0 + 17)
    (column,) = store.series.columns("v", T0, T0 + 20, 1)
    assert (column.sums.done, column.sums.tokens, column.waiting, column.running) == (1, 700, 0, 0)
    early = store.series.columns("v", T0, T0 + 5, 5)
    assert [(c.waiting, c.running) for c in early] == [(1, 0), (1, 0), (1, 0), (1, 0), (0, 1)], "it runs from its own start, not from when it was sent"


def test_a_slot_freed_before_its_rollouts_reply_is_counted_free_from_the_rollouts_recorded_end():
    """As vf-eval runs them, through the eval tap's store path: one slot, two rollouts.
    The first's recorded timing ends (vf-eval frees its slot) and the second begins
    before the first's reply lands; the series counts each running for its own
    recorded timing, so never two in one slot."""
    clock = Clock()
    store = RolloutStore(clock=clock)
    runs = ObservedRuns("ev", store)
    runs.begin(b"0", {"id": "calc"}, "ev-0")
    clock.now = T0 + 1
    runs.delta(b"0", timed_trace(T0 + 1))  # recorded from T0+1 to T0+13
    clock.now = T0 + 13.5
    runs.begin(b"1", {"id": "calc"}, "ev-1")
    runs.delta(b"1", timed_trace(T0 + 13.5))
    clock.now = T0 + 15  # the first's reply, sent after vf-eval freed its slot
    runs.reply(b"0", {"success": True, "error": None, "head": {"ok": True}, "traces": [{"id": "t", "nodes": 2, "calls": 1}]})
    assert store.rollouts["ev/0"].status is Status.DONE
    columns = store.series.columns("ev", T0, T0 + 20, 20)
    assert [c.running for c in columns] == [0] + [1] * 19
