"""A training-shaped rollout for the token view's tests: the demo's `training`
scenario played in-process (no server, no waits), its deltas fed to a real store."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.tui_standin import StandInEngine, StandInVariant
from tracewatch.core.demo.agent import Pace
from tracewatch.core.demo.scenarios import Run, play
from tracewatch.core.demo.streamer import DeltaStreamer
from tracewatch.core.demo.tasks import DEFAULT_TASKS, parse
from tracewatch.core.demo.trace import LiveEpisode
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.wire.assembly import EpisodeAssembly
from tracewatch.core.wire.episode_json import episode_json
from tracewatch.core.wire.protocol import unpack_delta

TASK = next(task for task in DEFAULT_TASKS if task["scenario"] == "training")
KEY = "trainer/0"


async def training_deltas(seed: int = 1) -> list[dict]:
    return (await _played(seed))[1]


async def training_episode(seed: int = 1) -> dict[str, Any]:
    """The training rollout's finished episode, as verifiers' client assembles it from
    the deltas and the reply's head, in JSON's terms (`tracewatch.core.wire.episode_json`)."""
    episode, deltas = await _played(seed)
    assembly = EpisodeAssembly()
    for delta in deltas:
        assembly.apply(delta)
    summaries = [{"id": trace.id, "nodes": len(trace.nodes), "calls": len(trace.calls)} for trace in episode.traces]
    return json.loads(episode_json(assembly.finish(episode.head(), summaries)))


async def _played(seed: int) -> tuple[LiveEpisode, list[dict]]:
    task = parse(TASK)
    rng = random.Random(f"{seed}:{task.key}")
    episode = LiveEpisode(task.record, "demo")
    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    async with DeltaStreamer(lambda: episode.traces, send) as streamer:
        await play(Run(task, episode, Pace(rng, None, streamer.drain), rng, streamer.watch, "demo-model", {}, {}))
    return episode, [unpack_delta(data) for data in sent]


def training_engine(deltas: list[dict], clock: Callable[[], float] | None = None) -> StandInEngine:
    """A session with one training rollout that has had `deltas` applied."""
    store = RolloutStore(stall_seconds=60.0, **({"clock": clock} if clock else {}))
    engine = StandInEngine(store, {"trainer": StandInVariant("trainer", store)})
    store.add_rollout("trainer", 0, TASK, 0, key=KEY)
    store.started(KEY, "req-trainer")
    for delta in deltas:
        store.apply_delta(KEY, delta)
    return engine


def write_training_recording(path: Path, deltas: list[dict]) -> None:
    """A recording of the training rollout, as a live session would write it."""
    with Recorder(path, meta={"test": True}) as recorder:
        recorder.event("trainer", "started", t=1.0, pid=1, address="tcp://127.0.0.1:1", model="demo-model", sampling={})
        recorder.rollout(KEY, "trainer", 0, TASK, 0, t=1.0)
        recorder.request(KEY, "req", t=1.0)
        for index, delta in enumerate(deltas):
            recorder.delta(KEY, delta, t=2.0 + index)
