"""The run as a whole from a real demo recording: each rollout's times and the run's
series read the same live, replayed and opened."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from demo_sessions import demo_variant, write_config

from core.recordings.recorder import Recorder
from core.recordings.replay import OpenedRecording, ReplaySession
from core.session.config import load_config
from core.session.engine import Engine
from core.session.store import RolloutStore

TIME_SLACK = 0.5
"""The recorder stamps a record with its own clock call, a moment after the store's."""


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RolloutStore, Path]:
    """A live demo session of two variants (a normal, a failing and a retried rollout),
    recorded to its end: the live store and the recording."""
    tmp_path = tmp_path_factory.mktemp("demo")
    config = load_config(
        write_config(
            tmp_path,
            [demo_variant("base", ["normal", "failing"], max_concurrent=1), demo_variant("cand", ["normal", "retried"])],
        )
    )
    recording = tmp_path / "session.twrec"
    engine = Engine(config, recorder=Recorder(recording), session_dir=tmp_path / "session")

    async def live() -> None:
        await engine.start()
        await asyncio.wait_for(engine.wait(), 120)
        await engine.shutdown()

    asyncio.run(live())
    return engine.store, recording


def _totals(store: RolloutStore) -> dict[str, tuple]:
    series = store.series
    columns = {v: series.columns(v, series.first - 1, series.last + 1, 1)[0] for v in store.variants}
    return {v: (c.sums.done, c.sums.failed, c.sums.cancelled, c.sums.tokens, c.sums.rewarded, round(c.sums.reward_sum, 9), c.waiting, c.running) for v, c in columns.items()}


def test_times_and_series_read_the_same_live_replayed_and_opened(demo_run):
    live, recording = demo_run
    replay = ReplaySession(recording, speed=0)
    while replay.step():
        pass
    opened = OpenedRecording(recording)
    assert {r.status for r in live.rollouts.values()} >= {"done", "failed"}
    totals = _totals(live)
    assert totals["base"][:3] == (1, 1, 0) and totals["base"][6:] == (0, 0), totals
    for store in (replay.store, opened.store):
        assert _totals(store) == totals
        for key, rollout in live.rollouts.items():
            other = store.rollouts[key]
            assert other.status == rollout.status
            for mine, theirs in ((rollout.created_at, other.created_at), (rollout.started_at, other.started_at), (rollout.ended_at, other.ended_at)):
                assert abs(mine - theirs) < TIME_SLACK, key
            assert other.times.spans == rollout.times.spans, key
            assert (other.times.model, other.times.harness) == (rollout.times.model, rollout.times.harness)
    for key, rollout in live.rollouts.items():
        assert list(replay.store.rollouts[key].times.call_intervals()) == list(rollout.times.call_intervals())
        assert len(rollout.times.calls) >= 2, "every demo rollout called the model"
