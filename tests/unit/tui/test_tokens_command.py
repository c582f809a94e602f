"""`tracewatch tokens`: a rollout's tokens from a recording, with the values the token
view shows, as a table or strict JSON lines; hostile values and unknown ids are said
plainly."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support.training_session import KEY, training_deltas, training_engine, write_training_recording
from tests.support.tui_standin import write_recording
from tracewatch.cli import main
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.tokens.streams import read_message, token_values


@pytest.fixture(scope="module")
def deltas() -> list[dict]:
    return asyncio.run(training_deltas())


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["tokens", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_jsonl_has_every_stream_the_view_shows(deltas: list[dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "training.twrec"
    write_training_recording(path, deltas)
    (trace,) = training_engine(deltas).store.rollouts[KEY].traces.values()
    node = len(trace.nodes) - 1
    code, out, _ = run(capsys, str(path), "--rollout", KEY, "--node", str(node), "--format", "jsonl")
    assert code == 0
    head, *rows = [json.loads(line) for line in out.splitlines()]
    tokens = read_message(trace.nodes[node])
    assert head["kind"] == "message" and head["tokens"] == len(tokens) == len(rows) and head["trained"] == tokens.trained
    assert head["role"] == "assistant" and head["findings"] == []
    for index, row in enumerate(rows):
        expected = token_values(tokens, index)
        assert {name: row[name] for name in expected} == expected
    assert rows[0]["text"] == "<|im_start|>" and rows[0]["special"] is True  # the demo's model reads with its tokenizer

    code, out, _ = run(capsys, str(path), "--rollout", trace.id)  # a trace id names it too; every node with tokens
    lines = out.splitlines()
    assert code == 0 and sum(line.startswith(f"# {KEY} · ") for line in lines) == len(trace.nodes)
    assert "# ! logprobs has 0 values for" in out  # the tool result trained on
    header = next(line for line in lines if line.startswith("index\t"))
    assert header.split("\t")[:6] == ["index", "id", "text", "mask", "is_content", "logprobs"]


def strict(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


def test_hostile_values_stay_strict_json(deltas: list[dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    opened = next(delta for delta in deltas if delta.get("open"))
    hostile = {"parent": None, "message": {"role": "assistant", "content": "x"}, "sampled": True,
               "token_ids": [5, 6, 7], "mask": [True, True, True], "logprobs": [float("nan"), float("-inf"), 1e308],
               "trainer_logprobs": [0.0, 0.0]}
    path = tmp_path / "hostile.twrec"
    write_training_recording(path, [{"trace": opened["trace"], "open": opened["open"], "nodes": [hostile]}])
    code, out, _ = run(capsys, str(path), "--rollout", KEY, "--format", "jsonl", "--tokenizer", "nowhere/not-cached-model")
    head, *rows = [json.loads(line, parse_constant=strict) for line in out.splitlines()]
    assert [row["logprobs"] for row in rows] == ["NaN", "-inf", 1e308]
    assert "trainer_logprobs has 2 values for 3 trained tokens: not placed" in head["findings"]
    assert [row["text"] for row in rows] == ["⟨5⟩", "⟨6⟩", "⟨7⟩"]  # a tokenizer that is not there: ids


def test_an_unknown_rollout_is_named_with_what_there_is(deltas: list[dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "training.twrec"
    write_training_recording(path, deltas)
    code, _, err = run(capsys, str(path), "--rollout", "nope")
    assert code == 2 and f"no rollout or trace 'nope' in this source (rollouts: {KEY})" in err


def test_a_prime_rl_runs_rollout_prints_the_streams_its_files_hold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.prime_rl_run import credited, log_episodes, verifiers_agent
    from tests.support.training_session import training_episode

    episode = verifiers_agent(asyncio.run(training_episode()))
    log_episodes(tmp_path / "outputs", [credited(episode, 0.5)], 7, "train", "effective")
    written = episode["traces"][0]["nodes"][-1]
    code, out, _ = run(capsys, str(tmp_path / "outputs"), "--rollout", "train/0", "--node", str(len(episode["traces"][0]["nodes"]) - 1), "--format", "jsonl")
    assert code == 0
    head, *rows = [json.loads(line) for line in out.splitlines()]
    assert head["tokens"] == len(written["token_ids"]) == len(rows)
    assert [row["id"] for row in rows] == written["token_ids"]
    trained = [row for row in rows if row["mask"]]
    assert [row["advantages"] for row in trained] == [0.5] * len(trained)
    assert [row["trainer_logprobs"] for row in trained] == pytest.approx([round(v, 4) for v in written["trainer_logprobs"]])


def test_the_tables_trace_prefix_names_a_rollout_and_a_shared_one_names_its_matches(deltas: list[dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The table shows a trace's first 8 characters; `--rollout` said "no rollout or
    trace" for them. Any unique start of a trace id names its rollout's trace; one that
    starts several says which, so the user can pick."""
    path = tmp_path / "training.twrec"
    write_training_recording(path, deltas)
    (trace,) = training_engine(deltas).store.rollouts[KEY].traces.values()
    whole = run(capsys, str(path), "--rollout", trace.id, "--node", "1")
    assert whole[0] == 0 and run(capsys, str(path), "--rollout", trace.id[:8], "--node", "1") == whole
    both = tmp_path / "two variants.twrec"
    write_recording(both)  # each variant ran the same recorded traces, under the same ids
    shared = next(iter(OpenedRecording(both).store.rollouts["baseline/run0"].trace_ids))
    code, _, err = run(capsys, str(both), "--rollout", shared[:8])
    assert code == 2 and f"'{shared[:8]}' starts 2 traces: {shared} (baseline/run0), {shared} (candidate/run0); give more" in err, err
    assert run(capsys, str(both), "--rollout", "baseline/run0")[0] == 0
