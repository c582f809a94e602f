"""Finished verifiers runs written by verifiers 0.4.0's own writers, opened by
`open_run`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from verifiers.v1.cli.output import save_config
from verifiers.v1.configs.cli.eval import EvalConfig
from verifiers.v1.episode import WireEpisode
from verifiers.v1.utils.trace_store import write_episode

from tests.support.tui_standin import fixture_episodes
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.recordings.run_dir import RunDirError, open_run


@pytest.fixture
def run_dir(tmp_path) -> tuple[Path, EvalConfig]:
    """A run dir as `vf-eval` leaves it: `save_config` up front, then `write_episode`
    (what `append_episode` runs in its worker) for each episode as it lands."""
    config = EvalConfig(model="fake-model")
    out = tmp_path / "outputs" / config.run.dir
    save_config(config, out)
    for episode in fixture_episodes():
        write_episode(out, WireEpisode.model_validate(episode))
    return out, config


def test_every_episode_opens_with_its_traces_nodes_and_rewards(run_dir):
    out, config = run_dir
    run = open_run(out)
    assert run.run_dir == out
    assert run.traces_path == out / "traces.jsonl"
    assert run.config_path == out / "configs" / "resolved" / "eval.json"
    assert run.config == config.model_dump(mode="json")
    episodes = list(run.episodes())
    assert run.skipped == []
    expected = fixture_episodes()
    assert [e["id"] for e in episodes] == [e["id"] for e in expected]
    for episode, original in zip(episodes, expected):
        assert episode["ok"] == original["ok"]
        assert [t["id"] for t in episode["traces"]] == [t["id"] for t in original["traces"]]
        for trace, original_trace in zip(episode["traces"], original["traces"]):
            assert len(trace["nodes"]) == len(original_trace["nodes"])
            # verifiers writes without nulls: compare what a reader shows
            shown = [(n["message"]["role"], n["message"].get("content")) for n in trace["nodes"]]
            assert shown == [(n["message"]["role"], n["message"]["content"]) for n in original_trace["nodes"]]
            assert len(trace["calls"]) == len(original_trace["calls"])
            assert trace["rewards"] == original_trace["rewards"]
        # nothing lost: verifiers reads back exactly the episode it wrote
        assert WireEpisode.model_validate(episode).model_dump(mode="json") == original
    rewards = [t["rewards"].get("correct", {}).get("score") for e in episodes for t in e["traces"]]
    assert rewards == [1.0, 1.0, 1.0, 0.0, 1.0, None]


def test_a_run_dirs_traces_file_brings_its_config_a_bare_one_does_not(run_dir, tmp_path):
    out, config = run_dir
    run = open_run(out / "traces.jsonl")
    assert run.run_dir == out and run.config == config.model_dump(mode="json")
    bare = tmp_path / "elsewhere.jsonl"
    shutil.copy(out / "traces.jsonl", bare)
    run = open_run(bare)
    assert (run.run_dir, run.config, run.config_path) == (None, None, None)
    assert len(list(run.episodes())) == 6


def test_a_line_cut_by_a_killed_run_is_skipped_with_a_note(run_dir):
    out, _config = run_dir
    traces = out / "traces.jsonl"
    data = traces.read_bytes()
    traces.write_bytes(data + b"\n" + b'{"not": "an episode"}\n' + data[:500])
    run = open_run(out)
    assert len(list(run.episodes())) == 6
    assert run.skipped == [
        "line 8: not an episode (no 'traces' list)",
        "line 9: cut short (the run was stopped while writing it)",
    ]


def test_a_run_that_just_started_has_no_episodes_yet(tmp_path):
    out = tmp_path / "run"
    save_config(EvalConfig(model="fake-model"), out)
    run = open_run(out)
    assert list(run.episodes()) == [] and run.config is not None


def test_paths_that_are_not_runs_say_what_they_are(run_dir, tmp_path):
    out, _config = run_dir
    with pytest.raises(RunDirError, match="does not exist"):
        open_run(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RunDirError, match=r"has no traces.jsonl; a verifiers run dir holds"):
        open_run(empty)
    with pytest.raises(RunDirError, match=f"has no traces.jsonl; it holds runs: {out.name}"):
        open_run(out.parent)  # the output dir, one level too high
    recording = tmp_path / "run.twrec"
    with Recorder(recording) as rec:
        rec.event("v", "started")
    with pytest.raises(RunDirError, match="not a verifiers traces file: no line is an episode"):
        list(open_run(recording).episodes())
    broken_config = out / "configs" / "resolved" / "eval.json"
    broken_config.write_text("{")
    run = open_run(out)  # the config only describes the run: its episodes still open
    assert run.config is None and "the run's saved config is not JSON" in (run.config_problem or "")
    assert len(list(run.episodes())) == 6
