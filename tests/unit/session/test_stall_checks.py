"""The once-a-second stall checks look at the quietest live rollouts, not at every one:
with thousands in flight and few stalled they read those few, and what they find is
exactly what a pass over every rollout with `Rollout.stalled` finds, whatever the
order rollouts start, speak, cancel and end in, and at times set out of order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.session.test_tallies import CountedReads
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import RolloutStore

STALL = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_stall_check_over_thousands_in_flight_reads_the_stalled_and_one_more():
    clock = Clock()
    store = RolloutStore(stall_seconds=STALL, clock=clock)
    keys = [store.add_rollout("v", index, {}, key=f"v/{index}").key for index in range(2_000)]
    for key in keys:
        store.started(key, f"req-{key}")
        store.apply_delta(key, {"trace": "t", "open": {"id": "t"}})
        clock.now += 0.001
    clock.now += STALL - 1.0
    for key in keys[3:]:  # all but three speak again
        store.apply_delta(key, {"trace": "t", "set": {"x": 1}})
    clock.now += 1.5
    store.rollouts = reads = CountedReads(store.rollouts)

    stalled = [rollout.key for rollout in store.stalled(clock.now)]
    counts = store.live_counts(clock.now)

    assert stalled == keys[:3] and counts == (2_000, 3)
    assert reads.reads <= 4, f"the stall checks read {reads.reads} rollouts for 3 stalled"


steps = st.lists(
    st.tuples(
        st.integers(0, 7),
        st.sampled_from(("start", "speak", "speak earlier", "cancel", "end", "wait", "wait long", "reload", "restore")),
    ),
    max_size=40,
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(steps, st.floats(1.0, 20.0))
def test_the_stall_checks_find_what_a_pass_over_every_rollout_finds(steps: list[tuple[int, str]], other: float) -> None:
    clock = Clock()
    thresholds = {"a": other}
    store = RolloutStore(stall_seconds=STALL, clock=clock, stall_by_variant=thresholds)
    for index in range(8):
        store.add_rollout("ab"[index % 2], index, {}, key=f"k{index}")
    for index, what in steps:
        key = f"k{index}"
        rollout = store.rollouts[key]
        if what == "wait":
            clock.now += 3.0
        elif what == "wait long":
            clock.now += STALL + 1.0
        elif what == "start" and rollout.status is Status.QUEUED:
            store.started(key, f"req-{key}")
        elif what in ("speak", "speak earlier") and not rollout.status.finished:
            delta = {"trace": "t", "set": {"x": 1}} if "t" in rollout.traces else {"trace": "t", "open": {"id": "t"}}
            store.apply_delta(key, delta, t=clock.now - (7.0 if what == "speak earlier" else 0.0))
        elif what == "cancel":
            store.cancelling(key)
        elif what == "end":
            store.failed(key, "gone")
        elif what == "reload":
            store.reset_rollout(key)
        elif what == "restore" and rollout.status is Status.QUEUED:
            store.restore(key, Status.RUNNING)
        expected = {r.key for r in store.rollouts.values() if r.stalled(clock.now, thresholds.get(r.variant, STALL))}
        found = store.stalled(clock.now)
        assert {r.key for r in found} == expected and len(found) == len(expected)
        starts = [r.started_at or 0.0 for r in found]
        assert starts == sorted(starts), "oldest first"
        running = sum(r.status is Status.RUNNING and not r.waiting for r in store.rollouts.values())
        assert store.live_counts(clock.now) == (running, len(expected)), "the status line counts the same stalls"
