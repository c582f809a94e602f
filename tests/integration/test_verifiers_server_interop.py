"""tracewatch's wire core against verifiers 0.4.0's OWN env server (`serve_env`: a lone
EnvServer and a 2-worker EnvServerPool), serving a real bash-harness rollout against
a scripted fake model, side by side with verifiers' own EnvClient."""

from __future__ import annotations

import asyncio
import threading

import pytest
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.episode import WireEpisode
from verifiers.v1.serve import EnvClient as VerifiersClient
from verifiers.v1.serve.delta import EpisodeAssembly as VerifiersAssembly
from verifiers.v1.serve.types import RunResponse
from verifiers.v1.types import SamplingConfig as VerifiersSampling

from tests.support.interop import tw_calc
from tests.support.interop.fake_model import MODEL, FakeModel
from tests.support.interop.servers import API_KEY_VAR, ServerProcess
from tests.support.polling import eventually
from tracewatch.core.wire.assembly import EpisodeAssembly
from tracewatch.core.wire.client import EnvClient, RunFailed, new_request_id

pytestmark = pytest.mark.verifiers

DEADLINE = 60.0
SAMPLING = {"temperature": 0.0, "max_tokens": 256}

TASKS = {
    "plain": (tw_calc.task(0, "17 * 23", 391), 1.0),
    "parallel": (tw_calc.task(1, "(120 + 37) * 3", 471, "tools=2 parallel=1"), 1.0),
    "wrong": (tw_calc.task(2, "1000 / 8 + 6", 131, "wrong=1"), 0.0),
    "retried": (tw_calc.task(3, "7 * 7 * 7", 343, "fail=1"), 1.0),
}


@pytest.fixture(scope="module", params=[1, 2], ids=["server", "pool2"])
def server(request, tmp_path_factory):
    """verifiers' serve_env in a subprocess, HOME in a temporary folder; stopped by
    PID (and its process group) at teardown."""
    process = ServerProcess(request.param, tmp_path_factory.mktemp(f"home{request.param}"))
    yield process
    process.stop()


@pytest.fixture
def model():
    with FakeModel() as fake:
        yield fake


@pytest.fixture
async def ours(server):
    client = EnvClient(server.address)
    await client.wait_for_server_startup(timeout=DEADLINE)
    yield client
    await client.close()


class RecordingClient(VerifiersClient):
    """verifiers' EnvClient, keeping each run's reply so its recorded deltas can be
    assembled and finished again outside it."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.replies: dict[str, RunResponse] = {}

    async def _request(self, request, response_type, timeout=None, on_delta=None):
        response = await super()._request(request, response_type, timeout, on_delta)
        if isinstance(response, RunResponse) and response.head is not None:
            self.replies[response.head["id"]] = response
        return response


def essence(episode: dict) -> list[dict]:
    """What must agree between two rollouts of the same task: contents, tool calls,
    tree shape, usage, errors and scores (ids, timestamps and timings differ)."""
    return [
        {
            "messages": [
                (n["message"]["role"], n["message"].get("content"), n["message"].get("tool_calls"), n["message"].get("tool_call_id"))
                for n in trace["nodes"]
            ],
            "parents": [n["parent"] for n in trace["nodes"]],
            "calls": [(c["node"], c["usage"], c["finish_reason"], (c["error"] or {}).get("status_code")) for c in trace["calls"]],
            "tools": trace["tools"],
            "scores": (trace["rewards"], trace["metrics"], trace["stop_condition"], trace["ok"], trace["is_completed"]),
            "tokens": (trace["num_input_tokens"], trace["num_output_tokens"], trace["num_total_tokens"]),
        }
        for trace in episode["traces"]
    ]


async def test_our_run_matches_verifiers_own_client(server, ours, model):
    """(a) our EnvClient.run gives the episode verifiers' EnvClient gets, and (b) the
    deltas verifiers' client saw assemble, in ours, to exactly verifiers' record."""
    theirs = RecordingClient(server.address)
    client = {"base_url": model.base_url, "api_key_var": API_KEY_VAR}
    deltas: dict[str, list[dict]] = {name: [] for name in TASKS}
    try:
        ours_runs = [
            ours.run(task.data.model_dump(mode="json"), client, MODEL, SAMPLING) for task, _ in TASKS.values()
        ]
        theirs_runs = [
            theirs.run(
                EvalClientConfig(**client),
                MODEL,
                VerifiersSampling(**SAMPLING),
                task.data.model_dump(mode="json"),
                on_delta=deltas[name].append,
            )
            for name, (task, _) in TASKS.items()
        ]
        results = await asyncio.wait_for(asyncio.gather(*ours_runs, *theirs_runs), 2 * DEADLINE)
    finally:
        await theirs.close()
    for (name, (_, reward)), record, reference in zip(TASKS.items(), results, results[len(TASKS) :]):
        ours_episode = WireEpisode.model_validate(record).model_dump(mode="json")
        reference = reference.model_dump(mode="json")
        assert essence(ours_episode) == essence(reference), name
        (trace,) = ours_episode["traces"]
        assert trace["rewards"]["correct"]["score"] == reward, name
        assert trace["stop_condition"] == "agent_completed", name
        # (b) verifiers' recorded stream through our assembly: its exact record
        reply = theirs.replies[reference["id"]]
        assembly, verifiers_assembly = EpisodeAssembly(), VerifiersAssembly()
        for delta in deltas[name]:
            assembly.apply(delta)
            verifiers_assembly.apply(delta)
        assembled = assembly.finish(reply.head, reply.traces)
        assert assembled == verifiers_assembly.finish(reply.head, reply.traces), name
        assert WireEpisode.model_validate(assembled).model_dump(mode="json") == reference, name
    by_name = dict(zip(TASKS, (WireEpisode.model_validate(r).model_dump(mode="json") for r in results)))
    calls = by_name["parallel"]["traces"][0]["nodes"][2]["message"]["tool_calls"]
    assert [call["id"] for call in calls] == ["call_1_0", "call_1_1"]
    retried = by_name["retried"]["traces"][0]["calls"]
    assert retried[0]["node"] is None and retried[0]["error"]["status_code"] == 500
    # every rollout asked for the model list once
    assert model.models_calls == 2 * len(TASKS)


async def test_cancel_stops_a_run_stuck_in_a_model_call(server, ours, model):
    """(c) a run hanging in its second model call is aborted on the server by a cancel
    naming its wire id, and its caller learns it was aborted."""
    task = tw_calc.task(5, "6 * 7", 42, "hang=2")
    request_id = new_request_id()
    live = EpisodeAssembly()
    run = asyncio.create_task(
        ours.run(
            task.data.model_dump(mode="json"),
            {"base_url": model.base_url, "api_key_var": API_KEY_VAR},
            MODEL,
            SAMPLING,
            request_id=request_id,
            assembly=live,
        )
    )
    assert await asyncio.to_thread(model.hanging.wait, DEADLINE), "the model call never hung"
    assert request_id in ours.in_flight and not run.done()

    def previewing() -> bool:
        return any(m.get("role") == "tool" for t in live.traces.values() for m in t["pending"])

    # the tool result's preview streams before the model answers
    await eventually(previewing, DEADLINE, "the tool result's pending preview")
    assert await ours.cancel(request_id) is True
    with pytest.raises(RunFailed) as failed:
        await asyncio.wait_for(run, DEADLINE)
    assert failed.value.aborted
    assert ours.in_flight == []
    # the run is gone from the server: a second cancel finds nothing
    assert await ours.cancel(request_id) is False


def test_fake_model_release_unblocks_a_hanging_call():
    """The fixture's teardown relies on this: a hung call ends when released."""
    import json
    import urllib.request

    with FakeModel() as fake:
        body = json.dumps(
            {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "Expression: 1 + 1\n[[fake: hang=1]]"}]}
        ).encode()
        result: list[bytes] = []

        def call() -> None:
            request = urllib.request.Request(f"{fake.base_url}/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=DEADLINE) as response:
                result.append(response.read())

        caller = threading.Thread(target=call)
        caller.start()
        assert fake.hanging.wait(DEADLINE)
        assert caller.is_alive()
        fake.release()
        caller.join(DEADLINE)
        assert b'"usage"' in result[0] and result[0].endswith(b"data: [DONE]\n\n")
