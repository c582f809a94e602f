"""Each demo scenario streams what it promises, read off the real delta stream of a
real server process."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from tests.support.demo_launch import launch, stop
from tracewatch.core.demo.tasks import DEFAULT_TASKS
from tracewatch.core.wire.client import EnvClient

SPEED = 100.0
DEADLINE = 60.0
BY_ID = {task["id"]: task for task in DEFAULT_TASKS}
TASKS = {task["scenario"]: task for task in DEFAULT_TASKS}
PHASES = ("boot", "setup", "agent", "finalize", "scoring")


@pytest.fixture(scope="module")
def address():
    proc, address = launch(speed=SPEED, seed=5, stderr=subprocess.DEVNULL)
    yield address
    stop(proc)


async def play(address: str, *tasks: dict) -> list[tuple[dict, list[dict]]]:
    """Run tasks concurrently; each one's episode record and its deltas in order."""
    client = EnvClient(address)
    try:
        async def one(task: dict) -> tuple[dict, list[dict]]:
            deltas: list[dict] = []
            record = await client.run(task, {}, "demo-model", {"temperature": 0.7}, deltas.append)
            return record, deltas

        return await asyncio.wait_for(asyncio.gather(*(one(task) for task in tasks)), DEADLINE)
    finally:
        await client.close()


def sets(deltas: list[dict], field: str) -> list:
    return [delta["set"][field] for delta in deltas if field in delta.get("set", {})]


def assert_turns_preview_then_commit(deltas: list[dict]) -> None:
    """Before each committed turn the trace previews exactly its new input messages;
    the commit clears it (no `pending` key: nodes landing clear it)."""
    preview: dict[str, list] = {}
    turns = 0
    for delta in deltas:
        trace = delta["trace"]
        if "nodes" in delta:
            assert "pending" not in delta
            inputs = [node["message"] for node in delta["nodes"][:-1]]
            assert preview.get(trace) == inputs and inputs
            assert delta["nodes"][-1]["sampled"] and delta["calls"][-1]["node"] is not None
            turns += 1
        if "pending" in delta:
            preview[trace] = delta["pending"]
    assert turns >= 2


def assert_scored(trace: dict, deltas: list[dict]) -> None:
    rewards = [value for value in sets(deltas, "rewards") if value]
    assert len(rewards) == 2 and all(value is None for value in rewards[0].values())
    assert rewards[1] == trace["rewards"] and all(r["score"] is not None for r in rewards[1].values())
    metrics = [value for value in sets(deltas, "metrics") if value]
    assert all(value is None for value in metrics[0].values()) and metrics[-1] == trace["metrics"]
    timing = trace["timing"]
    for earlier, later in zip(PHASES, PHASES[1:]):
        assert 0 < timing[earlier]["start"] <= timing[earlier]["end"] <= timing[later]["start"]
    assert timing["scoring"]["end"] > 0
    agent = timing["agent"]
    assert agent["model"]["duration"] > 0 and agent["harness"]["duration"] > 0
    # the split is filled with the scores, at the very end
    assert all(t["agent"]["model"]["duration"] == 0 for t in sets(deltas, "timing")[:-1])
    assert trace["ok"] and trace["is_completed"] and trace["stop_condition"] == "agent_completed"


@pytest.mark.parametrize("task_id", [task["id"] for task in DEFAULT_TASKS if task["scenario"] == "normal"])
async def test_normal_rollouts_read_like_real_agent_work(address: str, task_id: str) -> None:
    [(record, deltas)] = await play(address, BY_ID[task_id])
    (trace,) = record["traces"]
    assert deltas[0]["open"]["task"]["data"]["id"] == task_id
    assert_turns_preview_then_commit(deltas)
    assert_scored(trace, deltas)
    messages = [node["message"] for node in trace["nodes"]]
    assert [m["role"] for m in messages[:2]] == ["system", "user"] and messages[-1]["role"] == "assistant"
    assert trace["nodes"][0]["tools"] == trace["tools"] and trace["tools"]
    assert any(len(m.get("tool_calls") or []) > 1 for m in messages), "parallel tool calls"
    assert any(m.get("reasoning_content") for m in messages)
    code_and_output = [m["content"] for m in messages if m["role"] == "tool"] + [
        value for m in messages for call in m.get("tool_calls") or [] for value in json.loads(call["arguments"]).values()
    ]
    assert any(text.count("\n") >= 4 for text in code_and_output), "multi-line code or tool output"
    for call in trace["calls"]:
        assert call["usage"]["prompt_tokens"] > 0 and call["usage"]["completion_tokens"] > 0
        assert call["time"]["end"] >= call["time"]["start"] > 0 and call["error"] is None
    assert trace["num_total_tokens"] == trace["num_input_tokens"] + trace["num_output_tokens"] > 0
    assert record["num_total_tokens"] == trace["num_total_tokens"] and record["ok"]


async def test_failing_records_the_provider_error_and_skips_scoring(address: str) -> None:
    [(record, deltas)] = await play(address, TASKS["failing"])
    (trace,) = record["traces"]
    assert trace["errors"][0]["type"] == "ProviderError" and trace["errors"][0]["status_code"] == 400
    refused = trace["calls"][-1]
    assert refused["node"] is None and refused["error"] == trace["errors"][0] and refused["usage"] is None
    assert trace["stop_condition"] == "provider_error" and not trace["ok"] and not record["ok"]
    assert trace["rewards"] == {} and trace["timing"]["scoring"] == {"start": 0.0, "end": 0.0}
    assert trace["timing"]["agent"]["end"] > 0
    assert any(delta.get("pending") == [] and "calls" in delta for delta in deltas)


async def test_transient_error_then_retry(address: str) -> None:
    [(record, deltas)] = await play(address, TASKS["transient"])
    (trace,) = record["traces"]
    failed = [i for i, call in enumerate(trace["calls"]) if call["error"] is not None]
    assert len(failed) == 1
    call = trace["calls"][failed[0]]
    assert call["node"] is None and call["error"]["status_code"] in (429, 503)
    assert trace["calls"][failed[0] + 1]["node"] is not None
    assert trace["errors"] == [] and trace["ok"] and record["ok"]
    assert_turns_preview_then_commit(deltas)


async def test_a_retried_attempt_is_discarded_and_a_fresh_trace_runs(address: str) -> None:
    [(record, deltas)] = await play(address, TASKS["retried"])
    opened = [delta["trace"] for delta in deltas if "open" in delta]
    discarded = [delta["trace"] for delta in deltas if delta.get("discard")]
    assert len(opened) == 2 and discarded == opened[:1]
    assert [trace["id"] for trace in record["traces"]] == opened[1:]
    assert record["errors"][0]["type"] == "SandboxError" and record["ok"]
    first = [delta for delta in deltas if delta["trace"] == opened[0]]
    assert sets(first, "stop_condition")[-1] == "sandbox_error"


async def test_multi_agent_streams_a_solver_and_a_judge(address: str) -> None:
    [(record, deltas)] = await play(address, TASKS["multi-agent"])
    solver, judge = record["traces"]
    assert (solver["agent"]["name"], judge["agent"]["name"]) == ("solver", "judge")
    assert solver["agent"]["trainable"] and not judge["agent"]["trainable"]
    assert "Submitted answer" in judge["nodes"][1]["message"]["content"]
    assert '"verdict": "correct"' in judge["nodes"][-1]["message"]["content"]
    for trace in (solver, judge):
        assert_scored(trace, [delta for delta in deltas if delta["trace"] == trace["id"]])
    assert record["num_total_tokens"] == solver["num_total_tokens"] + judge["num_total_tokens"]


async def test_content_depends_on_seed_and_task_not_arrival_order(address: str) -> None:
    normal, math = TASKS["normal"], BY_ID["demo-1-normal"]
    runs = await play(address, normal, math, math, normal)

    def content(record: dict) -> list:
        return [(n["message"], c["usage"]) for t in record["traces"] for n, c in zip(t["nodes"], t["calls"])]

    assert content(runs[0][0]) == content(runs[3][0])
    assert content(runs[1][0]) == content(runs[2][0])
    assert content(runs[0][0]) != content(runs[1][0])


async def test_scale_streams_token_arrays_without_waiting() -> None:
    # speed 1: a scale run that waited like a human-paced one would take minutes
    proc, address = launch(speed=1.0, stderr=subprocess.DEVNULL)
    try:
        task = {"id": "scale-1", "scenario": "scale", "kind": "math", "turns": 40, "tokens": 300}
        [(record, deltas)] = await play(address, task)
    finally:
        stop(proc)
    (trace,) = record["traces"]
    assert sum(1 for delta in deltas if "nodes" in delta) == 41  # one delta per turn
    for node in trace["nodes"]:
        assert len(node["token_ids"]) == len(node["mask"]) == len(node["is_content"]) == 300
        assert len(node["logprobs"]) == sum(node["mask"])
        assert any(node["mask"]) == node["sampled"]
    assert trace["calls"][-1]["usage"]["prompt_tokens"] >= 300 * (len(trace["nodes"]) - 1)
    assert trace["ok"] and record["ok"]


async def test_training_streams_what_a_trainer_sees(address) -> None:
    """Every node's tokens are its message through the demo's template and tokenizer;
    the sampler's streams come with each sampled node, the trainer's from the second
    turn on; one tool result is trained on, and its message says what is missing."""
    from tracewatch.core.demo.training import ANNOTATED_FROM, demo_tokenizer
    from tracewatch.core.tokens.streams import read_message

    ((record, deltas),) = await play(address, TASKS["training"])
    (trace,) = record["traces"]
    text = demo_tokenizer()
    turn = 0
    trained_tools = []
    for node in trace["nodes"]:
        tokens = read_message(node)
        message = node["message"]
        shown = "".join(piece.text for piece in text.pieces(node["token_ids"]))
        assert shown.startswith(f"<|im_start|>{message['role']}\n")
        assert message["content"] in shown
        if node["sampled"]:
            turn += 1
            assert tokens.findings == ()
            assert len(node["logprobs"]) == tokens.trained == sum(node["mask"]) > 0
            trainer = {"advantages", "trainer_logprobs", "entropies", "reference_logprobs"}
            assert trainer <= set(tokens.compact) if turn >= ANNOTATED_FROM else not trainer & set(tokens.compact)
        elif tokens.trained:
            trained_tools.append(message["role"])
            assert tokens.findings == (
                f"a tool result is trained: {tokens.trained:,} tokens the model did not sample are in the loss",
                f"logprobs has 0 values for {tokens.trained} trained tokens: not placed",
            )
    assert trained_tools == ["tool"] and turn >= 3
    assert_scored(trace, deltas)
