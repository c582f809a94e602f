"""prime-rl training runs, as its file monitor writes them (`tests.support.prime_rl_run`),
opened by `open_folder`: both line shapes, each rollout with its step, an episode in
both subsets folded into one rollout with the trainer's credit, and damaged lines
skipped with where and why."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support.prime_rl_run import credited, log_episodes, renamed, verifiers_agent, with_judge
from tests.support.training_session import training_episode
from tracewatch.core.engine.opened import OpenedRun, OpenedTrainingRun, open_folder
from tracewatch.core.recordings.prime_rl_dir import PrimeRlDirError, open_prime_rl, rollouts_dir
from tracewatch.core.tokens.streams import read_message


@pytest.fixture(scope="module")
def episode() -> dict:
    return verifiers_agent(asyncio.run(training_episode()))


def training_run(out: Path, episode: dict) -> Path:
    """Two steps of train rollouts (step 1 one trace a line, as prime-rl wrote before it
    logged episodes; step 2 whole episodes) and an eval at step 2; step 2's first
    rollout trained on, so it is in `effective` too, with its credit."""
    log_episodes(out, [renamed(episode, 1), renamed(episode, 2)], 1, "train", "all", per_trace=True)
    log_episodes(out, [renamed(episode, 3), renamed(episode, 4)], 2, "train", "all")
    log_episodes(out, [credited(renamed(episode, 3), 0.25)], 2, "train", "effective")
    log_episodes(out, [renamed(episode, 5)], 2, "eval", "all")
    return out


def test_each_rollout_opens_once_with_its_step_and_kind(tmp_path, episode):
    session = open_folder(training_run(tmp_path / "outputs", episode))
    assert isinstance(session, OpenedTrainingRun)
    rollouts = list(session.store.rollouts.values())
    assert [(r.variant, r.step) for r in rollouts] == [("train", 1), ("train", 1), ("train", 2), ("train", 2), ("eval", 2)]
    assert session.store.steps_known
    assert [r.task_index for r in rollouts] == [0, 0, 0, 0, 0], "every rollout ran the one task"
    assert [r.rollout_index for r in rollouts] == [0, 1, 2, 3, 0]
    for rollout in rollouts:
        assert rollout.status.value == "done"
        assert rollout.turns == 6 and rollout.tokens == episode["traces"][0]["num_total_tokens"]
        assert rollout.flags == {"tool-trained", "misaligned"}, "the demo's trained tool result, flagged as in a live view"


def test_every_token_stream_is_the_one_prime_rl_wrote(tmp_path, episode):
    session = open_folder(training_run(tmp_path / "outputs", episode))
    original = episode["traces"][0]["nodes"]
    for key in ("train/0", "train/2", "train/3"):
        (trace,) = session.store.rollouts[key].traces.values()
        assert len(trace.nodes) == len(original)
        for node, written in zip(trace.nodes, original):
            tokens = read_message(node)
            assert list(tokens.ids) == written["token_ids"]
            assert [bool(m) for m in tokens.mask] == written["mask"]
    (trace,) = session.store.rollouts["train/2"].traces.values()
    last = read_message(trace.nodes[-1])
    sampled = [i for i, m in enumerate(original[-1]["mask"]) if m]
    # verifiers' to_record rounds per-token floats to 4 decimals
    assert [last.compact["logprobs"][i] for i in sampled] == pytest.approx([round(v, 4) for v in original[-1]["logprobs"]], abs=1e-6)
    assert [last.compact["trainer_logprobs"][i] for i in sampled] == pytest.approx([round(v, 4) for v in original[-1]["trainer_logprobs"]], abs=1e-6)
    assert [last.compact["advantages"][i] for i in sampled] == [0.25] * len(sampled), "the effective line's credit, folded over the all line"
    (untrained,) = session.store.rollouts["train/3"].traces.values()
    kept = read_message(untrained.nodes[-1]).compact["advantages"]
    assert [kept[i] for i in sampled] == pytest.approx([round(v, 4) for v in original[-1]["advantages"]]) != [0.25] * len(sampled)


def test_the_rollouts_folder_itself_opens_and_a_verifiers_run_is_not_taken_for_one(tmp_path, episode):
    out = training_run(tmp_path / "outputs", episode)
    assert rollouts_dir(out) == rollouts_dir(out / "rollouts") == out / "rollouts"
    assert len(open_folder(out / "rollouts").store.rollouts) == 5
    verifiers_run = tmp_path / "run"
    verifiers_run.mkdir()
    (verifiers_run / "traces.jsonl").write_text("")
    assert rollouts_dir(verifiers_run) is None
    assert type(open_folder(verifiers_run)) is OpenedRun


def test_a_cut_or_foreign_line_is_skipped_with_where_and_why(tmp_path, episode):
    out = training_run(tmp_path / "outputs", episode)
    written = out / "rollouts" / "step_2" / "train" / "all" / "traces.jsonl"
    with open(written, "ab") as f:
        f.write(b'{"step": 3, "loss": 0.1}\n{"id": "cut", "traces": [')
    run = open_prime_rl(out / "rollouts")
    assert len(run.episodes) == 5
    assert run.skipped == [
        f"{written} line 3: neither an episode nor a trace record",
        f"{written} line 4: cut short (the run was stopped while writing it)",
    ]
    nothing = tmp_path / "broken" / "rollouts" / "step_0" / "train" / "all"
    nothing.mkdir(parents=True)
    (nothing / "traces.jsonl").write_text("not json\n")
    with pytest.raises(PrimeRlDirError, match="holds no readable rollout: .* line 1: not JSON"):
        open_prime_rl(nothing.parents[2])


def test_a_run_that_logged_no_episode_yet_says_so(tmp_path):
    (tmp_path / "outputs" / "rollouts" / "step_0").mkdir(parents=True)
    session = open_folder(tmp_path / "outputs")
    assert not session.store.rollouts
    assert "no episodes" in session.readonly_reason


def test_episodes_without_an_id_each_open_as_a_rollout(tmp_path, episode):
    path = log_episodes(tmp_path / "outputs", [renamed(episode, 1), renamed(episode, 2)], 1, "train", "all")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "id"}) + "\n" for line in lines))
    session = open_folder(tmp_path / "outputs")
    assert [(r.variant, r.step) for r in session.store.rollouts.values()] == [("train", 1), ("train", 1)]


def test_a_multi_trace_episode_opens_as_one_rollout_in_either_line_shape(tmp_path, episode):
    """One trace a line (before prime-rl logged episodes) writes an episode's traces
    one after the other: they open as one rollout with its traces, as the same
    episodes logged whole do, and its effective traces fold over them. Each trace
    opened as a rollout of its own."""
    episodes = [with_judge(renamed(episode, number)) for number in (1, 2)]
    opened = {}
    for shape, per_trace in (("traces", True), ("episodes", False)):
        out = tmp_path / shape
        log_episodes(out, episodes, 1, "train", "all", per_trace=per_trace)
        log_episodes(out, [credited(episodes[1], 0.5)], 1, "train", "effective", per_trace=per_trace)
        store = open_folder(out).store
        opened[shape] = [(r.key, list(r.traces), r.status.value) for r in store.rollouts.values()]
        advantages = [node.get("advantages") for trace in store.rollouts["train/1"].traces.values() for node in trace.nodes]
        assert any(advantages), f"{shape}: the effective line's credit"
    assert opened["traces"] == opened["episodes"]
    assert [(key, len(traces)) for key, traces, _ in opened["traces"]] == [("train/0", 2), ("train/1", 2)]


def test_an_episode_of_three_traces_logged_one_a_line_opens_with_all_three(tmp_path, episode):
    """A third trace joins the episode its first two opened, as the second did: it
    was joined to a lone episode of the second trace that was never kept, and lost."""
    episodes = [with_judge(with_judge(renamed(episode, number)), "critic") for number in (1, 2)]
    log_episodes(tmp_path / "out", episodes, 1, "train", "all", per_trace=True)
    store = open_folder(tmp_path / "out").store
    assert [(key, len(r.traces)) for key, r in store.rollouts.items()] == [("train/0", 3), ("train/1", 3)]


def test_an_episode_missing_a_trace_does_not_take_the_next_episodes_first(tmp_path, episode):
    """The first episode lost its solver's trace (only its judge's was logged); the
    second, run at the same time as a group's episodes are, logged both. Its solver's
    trace, the next line, is of the same task by an agent the first had not seen, and
    was joined to it: two episodes became one of a judge then a solver, and one of a
    lone judge. It started before the first's judge ended, so it is an episode's first."""
    lost_solver = with_judge(renamed(episode, 1))
    lost_solver["traces"] = lost_solver["traces"][1:]
    whole = with_judge(renamed(episode, 2))
    log_episodes(tmp_path / "out", [lost_solver, whole], 1, "train", "all", per_trace=True)
    store = open_folder(tmp_path / "out").store
    opened = [list(r.traces) for r in store.rollouts.values()]
    assert opened == [[t["id"] for t in e["traces"]] for e in (lost_solver, whole)]
