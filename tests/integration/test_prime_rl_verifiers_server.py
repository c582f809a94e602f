"""A prime-rl run whose rollouts verifiers 0.4.0's own env server served: verifiers'
EnvClient hands each delta to `on_delta` as prime-rl's dispatcher receives it, the
dispatcher's events go through prime-rl's file monitor (live files, placeholders, the
record stamped and logged at arrival), and `PrimeRlRun`, polled on the same loop while
the rollouts run, sees each trace live, then lands it once, with the server's reward."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient as VerifiersClient
from verifiers.v1.types import SamplingConfig as VerifiersSampling

from tests.support.interop import tw_calc
from tests.support.interop.fake_model import MODEL, FakeModel
from tests.support.interop.servers import API_KEY_VAR, ServerProcess
from tests.support.polling import eventually
from tests.support.prime_rl_monitor import FileMonitor
from tracewatch.core.recordings.prime_rl.layout import find_run
from tracewatch.core.recordings.prime_rl.run import PrimeRlRun

pytestmark = pytest.mark.verifiers

DEADLINE = 90.0
TASKS = [(tw_calc.task(0, "17 * 23", 391, "tools=2"), 1.0), (tw_calc.task(1, "1000 / 8 + 6", 131, "tools=2 wrong=1"), 0.0)]


@pytest.fixture
def server(tmp_path_factory):
    process = ServerProcess(1, tmp_path_factory.mktemp("home"))
    yield process
    process.stop()


async def test_rollouts_served_by_verifiers_are_followed_live_then_land_once(server, tmp_path):
    out = tmp_path / "out"
    monitor = FileMonitor(out, "orchestrator", chunk_bytes=4096, frame_bytes=1024)
    events: list[dict] = []
    client = VerifiersClient(server.address)
    run: PrimeRlRun | None = None
    seen_live: dict[str, list[str]] = {}
    landed: list[tuple[str, int]] = []

    async def dispatch(index: int, task) -> tuple:
        dispatch = {"id": f"d-{index}", "kind": "train", "env": "tw_calc", "group": str(uuid.uuid4()), "task": task.data.name, "policy_version": 0, "step": 7, "started": None}
        events.append({"pending": dispatch["id"], "dispatch": dispatch})
        streamed: list[bool] = []

        def on_delta(delta: dict) -> None:
            events.append({"delta": delta, "dispatch": dispatch})
            if not streamed:
                streamed.append(True)
                events.append({"dispatched": dispatch["id"]})

        episode = await client.run(EvalClientConfig(base_url=model.base_url, api_key_var=API_KEY_VAR), MODEL, VerifiersSampling(temperature=0.0, max_tokens=256), task.data.model_dump(mode="json"), on_delta=on_delta)
        events.extend({"done": trace.id} for trace in episode.traces)
        return episode, dispatch

    def flush() -> None:
        batch = events[:]
        del events[: len(batch)]
        if batch:
            monitor.log_live(batch)

    async def follow() -> None:
        nonlocal run
        while True:
            flush()
            if run is None:
                run = PrimeRlRun(find_run(out))
            changes = run.poll()
            for trace in run.live.traces.values():
                if trace.trace is not None:
                    seen_live.setdefault(trace.trace_id, []).append(trace.stage)
            landed.extend(changes.landed)
            await asyncio.sleep(0.02)

    with FakeModel() as model:
        follower = asyncio.create_task(follow())
        try:
            done = await asyncio.wait_for(asyncio.gather(*(dispatch(i, task) for i, (task, _) in enumerate(TASKS))), DEADLINE)
            flush()
            for episode, _ in done:
                for trace in episode.traces:
                    trace.info.update({"kind": "train", "dispatch": {"step": 7, "time": trace.timing.start}, "arrival": {"step": 7, "time": trace.timing.scoring.end}})
                episode.env.name = "tw_calc"
                monitor.log_episodes([episode])
            monitor.finalize()
            await eventually(lambda: len(landed) >= len(TASKS), DEADLINE, lambda: f"every task to land; landed {landed}, seen live {list(seen_live)}")
        finally:
            follower.cancel()
            await client.close()
    assert run is not None
    table = run.table
    assert len(table) == len(TASKS)
    rewards = {table.traces_of(row)[0]: table.column("reward")[row] for row in range(len(table))}
    for (episode, dispatch_info), (_, reward) in zip(done, TASKS):
        (trace,) = episode.traces
        assert trace.id in seen_live, "the rollout was followed while it ran"
        assert "running" in seen_live[trace.id]
        assert rewards[trace.id] == reward
        row = dict(landed)[trace.id]
        assert table.text("task", row) == dispatch_info["task"] and table.steps()[0][row] == 7
        opened = run.open_episode(row)
        assert [n["message"]["content"] for n in opened.record["traces"][0]["nodes"]] == [n.message.content for n in trace.nodes]
    assert sorted(trace_id for trace_id, _ in landed) == sorted(rewards)
