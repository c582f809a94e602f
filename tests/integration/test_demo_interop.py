"""verifiers 0.4.0's own client runs the demo's tasks and validates every episode, and
our client assembles the same records from the same server."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.episode import WireEpisode
from verifiers.v1.serve import EnvClient as VerifiersClient
from verifiers.v1.serve import EpisodeAssembly as VerifiersAssembly
from verifiers.v1.serve.delta import TraceSummary
from verifiers.v1.task import WireTaskData
from verifiers.v1.types import SamplingConfig

from tests.support.demo_launch import launch, stop
from tracewatch.core.demo.tasks import DEFAULT_TASKS
from tracewatch.core.wire.client import EnvClient
from tracewatch.core.wire.episode_json import episode_json
from tracewatch.core.wire.packed_list import PackedList
from tracewatch.core.wire.protocol import Packed, plain

SPEED = 100.0
DEADLINE = 90.0
SCALE = {"id": "interop-scale", "prompt": "p", "scenario": "scale", "turns": 4, "tokens": 300}
"""A tokenized rollout: its token arrays reach our store packed (`Packed`)."""
PLAYABLE = [task for task in DEFAULT_TASKS if task["scenario"] != "stuck"] + [SCALE]
SAMPLING = {"temperature": 0.7, "max_tokens": 2048}


@pytest.fixture(scope="module")
def address():
    proc, address = launch(speed=SPEED, seed=11, stderr=subprocess.DEVNULL)
    yield address
    stop(proc)


def test_every_default_task_is_valid_verifiers_task_data() -> None:
    for task in DEFAULT_TASKS:
        data = WireTaskData.model_validate(task)
        assert data.model_extra["scenario"] == task["scenario"]


async def run_with_verifiers(address: str) -> list[WireEpisode]:
    client = VerifiersClient(address)
    try:
        await client.wait_for_server_startup(timeout=DEADLINE)
        runs = (
            client.run(EvalClientConfig(), "demo-model", SamplingConfig(**SAMPLING), task) for task in PLAYABLE
        )
        return await asyncio.wait_for(asyncio.gather(*runs), DEADLINE)
    finally:
        await client.close()


async def run_with_ours(address: str) -> list[tuple[dict, list[dict]]]:
    client = EnvClient(address)
    try:
        async def one(task: dict) -> tuple[dict, list[dict]]:
            deltas: list[dict] = []
            return await client.run(task, {}, "demo-model", SAMPLING, deltas.append), deltas

        return await asyncio.wait_for(asyncio.gather(*(one(task) for task in PLAYABLE)), DEADLINE)
    finally:
        await client.close()


def content(episode: WireEpisode) -> list:
    """What the seed fixes: everything but ids and wall-clock times."""
    return [
        (
            trace.agent.name,
            [node.message.model_dump() for node in trace.nodes],
            [(call.node, call.usage, call.finish_reason, call.error) for call in trace.calls],
            trace.rewards,
            trace.metrics,
            trace.stop_condition,
            trace.ok,
            trace.num_total_tokens,
            [(node.token_ids, node.mask, node.is_content, node.logprobs) for node in trace.nodes],
        )
        for trace in episode.traces
    ] + [episode.ok, [error.type for error in episode.errors], episode.task.hash]


async def test_verifiers_client_and_ours_get_the_same_records(address: str) -> None:
    theirs = await run_with_verifiers(address)
    ours = await run_with_ours(address)
    expected_traces = {"multi-agent": 2}
    for task, episode, (record, deltas) in zip(PLAYABLE, theirs, ours, strict=True):
        assert isinstance(episode, WireEpisode)
        assert len(episode.traces) == expected_traces.get(task["scenario"], 1)
        assert episode.ok == (task["scenario"] != "failing")
        ours_typed = WireEpisode.model_validate(plain(record))
        assert content(ours_typed) == content(episode), task["id"]
        exported = json.loads(episode_json(record))
        assert [[n["token_ids"] for n in t["nodes"]] for t in exported["traces"]] == [
            [n.token_ids for n in t.nodes] for t in episode.traces
        ], task["id"]
        # our assembly of the stream equals verifiers' own assembly of it
        replay = VerifiersAssembly()
        for delta in deltas:
            replay.apply(plain(delta))
        head = {key: value for key, value in record.items() if key != "traces"}
        summaries = [TraceSummary(id=t["id"], nodes=len(t["nodes"]), calls=len(t["calls"])) for t in record["traces"]]
        assert replay.finish(head, summaries) == record
        # what our store keeps packed exports as verifiers' assembly, byte for byte
        assert all(isinstance(t["nodes"], PackedList) for t in record["traces"])
        assert episode_json(record) == episode_json(replay.finish(head, summaries)), task["id"]
    packed = [node["token_ids"] for node in ours[-1][0]["traces"][0]["nodes"]]
    assert packed and all(isinstance(ids, Packed) for ids in packed)  # the scale run's arrays stayed packed
