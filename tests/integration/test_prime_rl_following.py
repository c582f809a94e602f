"""A prime-rl run followed while it is written: prime-rl's orchestrator and trainer
played over verifiers' own objects on a thread (`tests/support/prime_rl_orchestrator`),
writing through prime-rl's file monitor as it writes (blank lines, placeholders,
retries, chunks rolled and sealed, annotations, metrics, the eval plan, a relaunch), and
`PrimeRlRun` polled until the writer is done and everything is read."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.polling import MARGIN, wait_until
from tests.support.prime_rl_orchestrator import RunWriter, Script, trainer_value
from tracewatch.core.recordings.prime_rl.episodes import STEP_FROM_DISPATCH
from tracewatch.core.recordings.prime_rl.layout import find_run
from tracewatch.core.recordings.prime_rl.run import PrimeRlRun, RunChanges

STATES = ("live", "landing", "finished")
LANDING = 5.0
"""The writer lands a record right after deleting its live file; a loaded box can hold
the writer's thread for a moment between the two."""


class Follower:
    """Polls the run, and after every poll checks that each trace seen is in exactly
    one state (live, landing or finished) until it is reported lost."""

    def __init__(self, run: PrimeRlRun) -> None:
        self.run = run
        self.seen: set[str] = set()
        self.lost: set[str] = set()
        self.landed: Counter[str] = Counter()
        self.dispatched: set[str] = set()
        """Traces that landed with their dispatch read: a file listed and gone before its
        first line was read lands with none, and its row's step comes from its record."""
        self.states: dict[str, set[str]] = {}

    def poll(self) -> RunChanges:
        changes = self.run.poll()
        self.landed.update(trace_id for trace_id, _ in changes.landed)
        self.dispatched.update(t.trace_id for t in changes.landed_traces if t.dispatch is not None and t.dispatch.step is not None)
        self.lost.update(trace.trace_id for trace in changes.lost)
        # every trace the follower reported, even one listed and gone within a poll
        self.seen.update(self.run.live.traces)
        self.seen.update(trace.trace_id for trace in (*changes.live.changed, *changes.live.vanished))
        for trace_id in self.seen - self.lost:
            where = self.run.where(trace_id)
            state = {name for name, on in zip(STATES, (where.live is not None and where.row < 0, where.landing is not None, where.row >= 0)) if on}
            assert len(state) == 1, f"trace {trace_id} is {state or 'nowhere'}: a gap or a double"
            self.states.setdefault(trace_id, set()).update(state)
        return changes

    def until_done(self, writer: RunWriter) -> None:
        def settled() -> bool:
            changes = self.poll()
            return writer.done.is_set() and not changes.more and not changes.live and not changes.rows and not self.run.landing

        wait_until(settled, timeout=120, what="the run read to its end")


@pytest.fixture
def followed(tmp_path):
    def follow(script: Script) -> tuple[RunWriter, Follower]:
        writer = RunWriter(tmp_path / "out", script).start()
        layout = wait_until(lambda: _layout(tmp_path / "out"), timeout=MARGIN, what="the run's folder")
        follower = Follower(PrimeRlRun(layout, landing_seconds=LANDING))
        follower.until_done(writer)
        writer.join()
        return writer, follower

    return follow


def _layout(out):
    try:
        return find_run(out)
    except ValueError:
        return None


def test_every_episode_of_a_followed_run_is_read_once_with_its_reward_step_and_streams(followed):
    writer, follower = followed(Script(episodes=30, concurrent=8, pause=0.002))
    run, table = follower.run, follower.run.table
    assert len(table) == len(writer.landed) == 30
    by_trace = {rollout.trace.id: rollout for rollout in writer.landed}
    assert sorted(tid for row in range(len(table)) for tid in table.traces_of(row)) == sorted(by_trace)
    for row in range(len(table)):
        (trace_id,) = table.traces_of(row)
        rollout = by_trace[trace_id]
        assert table.episode_id(row) == rollout.episode_id
        assert table.column("reward")[row] == rollout.reward
        assert table.text("kind", row) == rollout.kind and table.text("env", row) == rollout.env
        if trace_id not in follower.dispatched:  # its dispatch never read live (it came and went between two polls)
            run.open_episode(row)  # its record gives its step
        step, source = table.steps()
        assert step[row] == rollout.step and source[row] == STEP_FROM_DISPATCH
        assert table.text("task", row) == rollout.task
        assert table.column("ship_step")[row] == writer.shipped.get(trace_id, -1)
        assert table.column("effective")[row] == (1 if trace_id in writer.shipped else -1)
    # each trace seen live landed once, or was a retry's discarded attempt
    assert set(follower.landed) | follower.lost == follower.seen
    assert max(follower.landed.values()) == 1
    assert follower.lost == writer.discarded & follower.seen
    assert follower.landed, "some rollouts were followed live"
    assert all(follower.states[t] <= {"live", "landing", "finished"} for t in follower.seen)
    # the trainer's streams sit on the tokens they were computed for
    shipped_rows = [row for row in range(len(table)) if table.traces_of(row)[0] in writer.shipped]
    assert shipped_rows
    for row in shipped_rows:
        opened = run.open_episode(row)
        (trace,) = opened.record["traces"]
        assert opened.problems == []
        assert trace["info"]["effective"] is True and trace["info"]["ship"]["step"] == writer.shipped[trace["id"]]
        sampled_nodes = [(n, node) for n, node in enumerate(trace["nodes"]) if any(node["mask"])]
        assert sampled_nodes
        for n, node in sampled_nodes:
            expected = [trainer_value(n, j) for j, on in enumerate(node["mask"]) if on]
            assert node["trainer_logprobs"] == expected, (row, n)
            assert node["entropies"] == [-v for v in expected]
            assert node["advantages"] == [0.5] * len(expected)
            assert node["is_masked"] == [False] * len(expected)
        assert "trainer_logprobs" not in trace["nodes"][0]


def test_a_forked_trace_gets_each_branch_s_streams_on_its_own_nodes(followed):
    writer, follower = followed(Script(episodes=12, concurrent=4, fork_every=2, ship_every=3))
    run, table = follower.run, follower.run.table
    forked = [row for row in range(len(table)) if table.column("branches")[row] == 2 and table.traces_of(row)[0] in writer.shipped]
    assert forked
    for row in forked:
        (trace,) = run.open_episode(row).record["traces"]
        leaves = [n for n in range(len(trace["nodes"])) if n not in {node.get("parent") for node in trace["nodes"]}]
        assert len(leaves) == 2
        for n in leaves:
            node = trace["nodes"][n]
            assert node["trainer_logprobs"] == [trainer_value(n, j) for j, on in enumerate(node["mask"]) if on]


def test_a_relaunch_clears_the_live_traces_and_the_stream_carries_on(followed):
    writer, follower = followed(Script(episodes=24, concurrent=6, relaunch_after=10))
    table = follower.run.table
    assert len(table) == len(writer.landed)
    lines = table.column("line").tolist()
    assert lines == list(range(1, len(table) + 1)), "prime-rl numbers on across the relaunch"
    assert follower.lost == writer.discarded & follower.seen
    assert set(follower.landed) == {r.trace.id for r in writer.landed} & follower.seen


def test_eval_progress_counts_each_planned_step(followed):
    writer, follower = followed(Script(episodes=24, concurrent=6, eval_every=3))
    while follower.run.scan_steps():  # any eval episode that came and went between two polls
        pass
    progress = {(p.env, p.step): p for p in follower.run.eval_progress()}
    landed: Counter[int] = Counter(r.step for r in writer.landed if r.kind == "eval")
    assert {step for _, step in progress} == set(writer.planned)
    for (_, step), entry in progress.items():
        assert entry.expected == writer.planned[step]
        assert entry.done == landed[step] and entry.in_flight == 0 and entry.unknown_step == 0


def test_metrics_are_read_per_key_by_step_and_by_time(followed):
    writer, follower = followed(Script(episodes=18, concurrent=4, ship_every=3))
    metrics = follower.run.metrics
    reward = metrics.series("train/reward/mean")
    assert reward is not None and reward.by_step().step.tolist() == list(range(1, len(reward.step) + 1))
    grads = metrics.series("optim/grad_norm")
    assert [metrics.producers[code] for code in grads.producer] == ["trainer"] * len(grads.producer)
    running = metrics.series("inference/agg/num_requests_running/mean")
    assert len(running.by_time().value) == len(running.value) > 0 and len(running.by_step().value) == 0
