"""A variant's stats are kept counted as its rollouts change (`tracewatch.core.session.tallies`):
reading them after one rollout changed looks at no other rollout, and what they say is
exactly what a count over every rollout says, through any mix of starts, traces,
flags, endings, records, rollouts read again and a second run."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tracewatch.core.session.phases import DURATION_KEYS, percentile, phase_durations
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import RolloutStore, VariantStats

VARIANTS = ("alpha", "beta")
TRAINED_TOOL = {"message": {"role": "tool", "content": "x"}, "token_ids": [1], "mask": [True], "semantic_parents": []}


class CountedReads(dict[str, Rollout]):
    """The store's rollouts, counting each one looked up."""

    reads = 0

    def __getitem__(self, key: str) -> Rollout:
        self.reads += 1
        return super().__getitem__(key)

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.reads += 1
        return super().get(key, default)


def reference_stats(store: RolloutStore, variant: str, run: int | None, done: dict[str, dict[str, float]]) -> VariantStats:
    """Counted from scratch over every rollout of the variant, as the card defines it;
    the phases over the seconds each done rollout had as it ended (`done`, by key)."""
    counts = dict.fromkeys(Status, 0)
    rewards: list[float] = []
    flagged: dict[str, int] = {}
    for rollout in store.variant_rollouts(variant):
        if run is not None and rollout.run != run:
            continue
        status = Status.QUEUED if rollout.waiting else rollout.status
        counts[status] += 1
        for flag in rollout.flags:
            flagged[flag] = flagged.get(flag, 0) + 1
        if status.finished and (rollout.traces or rollout.facts is not None) and rollout.reward is not None:
            rewards.append(rollout.reward)
    by_phase: dict[str, list[float]] = {}
    for key in store.variants.get(variant, ()):
        for phase, seconds in done.get(key, {}).items():
            by_phase.setdefault(phase, []).append(seconds)
    phases = {p: (percentile(sorted(v), 0.5), percentile(sorted(v), 0.95)) for p in DURATION_KEYS if (v := by_phase.get(p))}
    mean = float(sum(map(Fraction, rewards)) / len(rewards)) if rewards else None
    return VariantStats(counts=counts, mean_reward=mean, scored=len(rewards), phases=phases, flagged=flagged)


def started(store: RolloutStore, variant: str, index: int, run: int = 1) -> str:
    key = store.add_rollout(variant, index, {"name": f"task {index}"}, key=f"{variant}/{run}/{index}", run=run).key
    store.started(key, f"req-{key}")
    return key


def test_stats_after_one_rollout_ended_look_at_no_other_rollout():
    store = RolloutStore()
    keys = [started(store, "alpha", index) for index in range(2_000)]
    for key in keys:
        store.apply_delta(key, {"trace": "t", "open": {"id": "t"}})
    assert store.stats("alpha").counts[Status.RUNNING] == 2_000 and store.running_count() == 2_000
    store.rollouts = reads = CountedReads(store.rollouts)

    store.apply_delta(keys[7], {"trace": "t", "set": {"rewards": {"r": {"score": 1.0}}}})
    store.finished(keys[7], {"ok": True, "traces": [{"id": "t"}]})
    reads.reads = 0
    stats = store.stats("alpha", run=store.latest_run("alpha"))
    running = store.running_count()

    assert (stats.counts[Status.DONE], stats.counts[Status.RUNNING], stats.mean_reward, running) == (1, 1_999, 1.0, 1_999)
    assert reads.reads <= 1, f"the card's and the status line's counts read {reads.reads} rollouts, not the one that changed"


steps = st.lists(
    st.tuples(
        st.integers(0, 11),
        st.sampled_from(
            ("start", "trace", "train", "discard", "reward", "huge reward", "done", "fail", "cancel", "record", "reload", "add", "second run")
        ),
    ),
    max_size=40,
)


def step(store: RolloutStore, done: dict[str, dict[str, float]], index: int, what: str) -> None:
    """One change to the store, where it applies to the rollout `index` picks."""
    keys = list(store.rollouts)
    key = keys[index % len(keys)]
    rollout = store.rollouts[key]
    if what == "add":
        store.add_rollout(VARIANTS[index % 2], index, {"name": "late"}, key=f"late{len(keys)}")
    elif what == "second run":
        store.add_rollout(VARIANTS[index % 2], index, {"name": "again"}, key=f"again{len(keys)}", run=2)
    elif what == "start" and rollout.status is Status.QUEUED:
        store.started(key, f"req-{key}")
    elif rollout.status.finished:
        if what == "record":  # the episode after the ending: its reward may come with it
            store.finished(key, {"ok": True, "traces": [{"id": "t"}]})
        elif what == "reload":  # read again from the start, as an opened recording loads it
            store.reset_rollout(key)
    elif rollout.status is Status.RUNNING:
        if what == "trace":
            store.apply_delta(key, {"trace": "t", "open": {"id": "t"}})
        elif what == "train" and "t" in rollout.traces:
            store.apply_delta(key, {"trace": "t", "nodes": [TRAINED_TOOL]})
        elif what == "discard" and "t" in rollout.traces:
            store.apply_delta(key, {"trace": "t", "discard": True})
        elif what.endswith("reward") and "t" in rollout.traces:
            store.apply_delta(key, {"trace": "t", "set": scored(index, huge=what == "huge reward")})
        elif what == "done":
            store.finished(key, {"ok": True, "traces": [{"id": "t"}]})
            if rollout.primary is not None:
                done[key] = phase_durations(rollout.primary.timing)
        elif what in ("fail", "cancel"):
            store.failed(key, "boom", cancelled=what == "cancel")


def scored(index: int, huge: bool) -> dict[str, object]:
    """A reward and timing; a huge reward is past a float sum's reach, or past any number."""
    if huge:
        score, weight = (1.5e308, 1.0) if index % 2 else (1e308, 10.0)
        return {"rewards": {"r": {"score": score, "weight": weight}}}
    timing = {"boot": {"start": 10.0, "end": 10.0 + index}, "agent": {"start": 11.0, "end": 12.0, "model": {"duration": 0.5}}}
    return {"rewards": {"r": {"score": index / 4}}, "timing": timing}


@settings(max_examples=150, deadline=None)
@given(steps)
@example([(0, "start"), (0, "trace"), (0, "discard")])  # its only trace gone: waiting again
@example([(i, what) for i in (1, 3) for what in ("start", "trace", "huge reward", "done")] + [(1, "start"), (1, "trace"), (1, "reward"), (1, "done"), (0, "second run"), (1, "reload")])
def test_stats_kept_counted_say_what_a_count_over_every_rollout_says(steps: list[tuple[int, str]]) -> None:
    store = RolloutStore()
    done: dict[str, dict[str, float]] = {}
    for index in range(4):
        store.add_rollout(VARIANTS[index % 2], index, {"name": f"task {index}"}, key=f"k{index}")
    for index, what in steps:
        step(store, done, index, what)
        for variant in VARIANTS:
            for run in (None, 1, 2):
                assert store.stats(variant, run) == reference_stats(store, variant, run, done), (variant, run)
        assert store.running_count() == store.live_counts()[0]


def test_a_delta_that_raises_a_flag_shows_all_it_carried_at_once():
    """The flag has the cards count the rollout again, which reads its row's facts:
    read before the delta's calls were counted, they would miss its failed call (and
    the call's time) until the next delta."""
    store = RolloutStore()
    key = started(store, "alpha", 0)
    store.apply_delta(key, {"trace": "t", "open": {"id": "t"}})
    failed_call = {"node": None, "error": {"type": "RateLimit", "message": "slow down"}, "usage": {"duration": 1.0}}
    store.apply_delta(key, {"trace": "t", "nodes": [TRAINED_TOOL], "calls": [failed_call]})

    rollout = store.rollouts[key]
    assert store.stats("alpha").flagged == {"tool-trained": 1}
    assert (rollout.errors, "ratelimit: slow down" in rollout.summary().error_text) == (1, True)
