"""A training-shaped rollout for the token view's tests: the demo's `training`
scenario played in-process (no server, no waits), its deltas fed to a real store."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from core.demo.agent import Pace
from core.demo.scenarios import Run, play
from core.demo.streamer import DeltaStreamer
from core.demo.tasks import DEFAULT_TASKS, parse
from core.demo.trace import LiveEpisode
from core.session.store import RolloutStore
from core.wire.protocol import unpack_delta
from tests.support.tui_standin import StandInEngine, StandInVariant

TASK = next(task for task in DEFAULT_TASKS if task["scenario"] == "training")
KEY = "trainer/0"


async def training_deltas(seed: int = 1) -> list[dict]:
    task = parse(TASK)
    rng = random.Random(f"{seed}:{task.key}")
    episode = LiveEpisode(task.record, "demo")
    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    async with DeltaStreamer(lambda: episode.traces, send) as streamer:
        await play(Run(task, episode, Pace(rng, None, streamer.drain), rng, streamer.watch, "demo-model", {}, {}))
    return [unpack_delta(data) for data in sent]


def training_engine(deltas: list[dict], clock: Callable[[], float] | None = None) -> StandInEngine:
    """A session with one training rollout that has had `deltas` applied."""
    store = RolloutStore(stall_seconds=60.0, **({"clock": clock} if clock else {}))
    engine = StandInEngine(store, {"trainer": StandInVariant("trainer", store)})
    store.add_rollout("trainer", 0, TASK, 0, key=KEY)
    store.started(KEY, "req-trainer")
    for delta in deltas:
        store.apply_delta(KEY, delta)
    return engine


def all_training_deltas() -> list[dict]:
    return asyncio.run(training_deltas())
