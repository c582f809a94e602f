"""`tracewatch open RUN` on a prime-rl run in the stream layout, as a child process,
while prime-rl's orchestrator and trainer write the run on a thread
(`tests/support/prime_rl_orchestrator.RunWriter`): what it prints against what was
written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.polling import MARGIN, wait_until
from tests.support.prime_rl_orchestrator import RunWriter, Script, trainer_value
from tests.support.repo import REPO

LINE = re.compile(r"^(?P<variant>[^/\s]+)/(?P<id>\S+) \[.*\] (?P<status>\w+)(?: · reward (?P<reward>\S+))?")


def tracewatch(*argv: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRACEWATCH_HOME": str(cwd / "home"), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "tracewatch.cli", *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def rollout_lines(stdout: str) -> list[re.Match[str]]:
    return [match for line in stdout.splitlines() if (match := LINE.match(line))]


def check_every_episode_once(writer: RunWriter, lines: list[re.Match[str]]) -> dict[str, list[str]]:
    """Each landed episode ends once, under its dispatch id (seen live) or its episode
    id, with its reward and its variant; what each row printed, by id."""
    written = {}
    for rollout in writer.landed:
        written[rollout.dispatch_id] = written[rollout.episode_id] = rollout
    statuses: dict[str, list[str]] = {}
    for match in lines:
        statuses.setdefault(match["id"], []).append(match["status"])
    ended = [match for match in lines if match["status"] == "done"]
    assert sorted(id(written[match["id"]]) for match in ended) == sorted(id(rollout) for rollout in writer.landed), "every episode once"
    for match in ended:
        rollout = written[match["id"]]
        assert float(match["reward"]) == rollout.reward
        assert match["variant"] == f"{rollout.kind}:{rollout.env}"
    return statuses


def test_open_follows_a_run_being_written_until_it_is_idle(tmp_path):
    writer = RunWriter(tmp_path / "out", Script(episodes=24, concurrent=6, pause=0.1)).start()
    wait_until(lambda: (tmp_path / "out" / "monitors" / "file").is_dir(), timeout=MARGIN, what="the run's folder")
    done = tracewatch("open", str(tmp_path / "out"), "--headless", "--until-idle", "4", cwd=tmp_path)
    writer.join()
    assert done.returncode == 0, done.stdout + done.stderr
    statuses = check_every_episode_once(writer, rollout_lines(done.stdout))
    followed = [steps for key, steps in statuses.items() if key.startswith("d-")]
    assert followed, f"no rollout was followed in flight: {done.stdout}"
    assert all(steps[-1] == "done" and steps.count("done") == 1 for steps in followed)
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("named", ["out", "out/monitors/file", "out/monitors/file/traces"])
def test_open_without_following_shows_the_run_as_it_is(tmp_path, named):
    writer = RunWriter(tmp_path / "out", Script(episodes=12, concurrent=4))
    writer.run()
    assert writer.error is None
    done = tracewatch("open", str(tmp_path / named), "--headless", "--no-follow", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    check_every_episode_once(writer, rollout_lines(done.stdout))


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, RunWriter]:
    """A finished run whose shipped cohorts carry the trainer's streams."""
    out = tmp_path_factory.mktemp("prime") / "out"
    writer = RunWriter(out, Script(episodes=12, concurrent=4, ship_every=3))
    writer.run()
    assert writer.error is None
    return out, writer


def test_compare_reads_a_run_task_by_task(written, tmp_path):
    out, writer = written
    done = tracewatch("compare", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for kind, env in {(r.kind, r.env) for r in writer.landed}:
        mine = [r for r in writer.landed if (r.kind, r.env) == (kind, env)]
        mean = sum(r.reward for r in mine) / len(mine)
        assert f"{kind}:{env}: mean reward {mean:.3f}" in done.stdout, done.stdout
    for rollout in writer.landed:  # each episode its own task, named as its record names it
        assert re.search(rf"^{re.escape(rollout.task)} ", done.stdout, re.M), rollout.task


def test_tokens_prints_the_trainer_s_streams_on_the_tokens_they_were_computed_for(written, tmp_path):
    out, writer = written
    shipped = next(r for r in writer.landed if r.trace.id in writer.shipped)
    done = tracewatch("tokens", str(out), "--rollout", shipped.trace.id, "--format", "jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    tokens = [line for line in lines if line["kind"] == "token"]
    trained = [t for t in tokens if t["mask"]]
    assert trained
    for token in trained:
        expected = trainer_value(token["node"], token["index"])
        assert token["trainer_logprobs"] == pytest.approx(expected)
        assert token["entropies"] == pytest.approx(-expected)
        assert token["advantages"] == 0.5
        assert token["mismatch"] == pytest.approx(expected - token["logprobs"])
        assert token["is_masked"] is False
    assert all(t["trainer_logprobs"] is None for t in tokens if not t["mask"])


def test_export_writes_each_episode_as_it_landed_and_its_timeline(written, tmp_path):
    out, writer = written
    done = tracewatch("export", str(out), str(tmp_path / "episodes.jsonl"), "--episodes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    episodes = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["id"] for e in episodes) == sorted(r.episode_id for r in writer.landed)
    shipped = {e["traces"][0]["id"]: e for e in episodes if e["traces"][0]["id"] in writer.shipped}
    assert shipped and all(e["traces"][0]["info"]["ship"]["step"] == writer.shipped[t] for t, e in shipped.items())
    done = tracewatch("export", str(out), str(tmp_path / "events.json"), "--trace-events", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"wrote {len(writer.landed)} rollouts" in done.stdout and "skipped" not in done.stdout, done.stdout
