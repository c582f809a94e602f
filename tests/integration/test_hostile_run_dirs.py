"""Hostile run folders through every command that reads them: generated verifiers run
directories and prime-rl output directories (the older `rollouts/step_N` layout, one
episode or one trace a line) whose episodes are changed where readers look, whose
numbers break arithmetic (inf, NaN, 1e308, 5e-324, integers past 64 bits), with lines
that are not episodes (nested 100,000 deep, cut, not JSON) and saved configs that
are not files or not JSON. `open --headless`, `compare`, `tokens` (both formats) and
`export --trace-events` run on each, as the command line runs them: none raises, one
bad episode is one failed row that says why, and every episode written unchanged
opens as it does from a clean run."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.hostile_run_dirs import BAD_LINES, CONFIGS, HostileRun, hostile_runs, write_config
from tests.support.hostile_values import WIRE_NUMBERS
from tests.support.repo import REPO
from tests.support.scripted_server import OK, header
from tracewatch.cli import main
from tracewatch.core.engine.opened import open_folder
from tracewatch.core.recordings import json_lines, run_dir
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.recordings.run_dir import RunDirError
from tracewatch.core.session.status import Status
from tracewatch.core.text import ESCAPES

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def command(*argv: str) -> tuple[int, str]:
    """`tracewatch ARGV` in this process, as the entry point runs it: any exception
    it lets out fails the test with its traceback."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    printed = out.getvalue() + err.getvalue()
    assert code in (0, 1, 2), (argv, code, printed)
    return code, printed


def every_command(path: Path, work: Path) -> None:
    """Each command on `path`; `tokens` on a few of its rollouts and trace ids."""
    code, printed = command("open", "--headless", str(path))
    assert "Traceback" not in printed
    command("compare", str(path), str(path))
    command("export", str(path), str(work / "events.json"), "--trace-events")
    try:
        session = open_folder(path)
    except RunDirError:
        assert code == 2  # no line is an episode: said, exit 2
        return
    names = [*list(session.store.rollouts)[:2], *[t for r in list(session.store.rollouts.values())[:1] for t in r.trace_ids]]
    for name in names:
        for form in ("table", "jsonl"):
            _, printed = command("tokens", str(path), "--rollout", name, "--format", form, "--tokenizer", "nowhere/not-cached")
            assert not [c for c in printed if ord(c) in ESCAPES and c not in "\n\t"], printed


def clean_endings(run: HostileRun, work: Path) -> dict[str, tuple[Status, float | None, int]]:
    """How each unchanged episode ends when it is opened alone."""
    clean = HostileRun([run.lines[number] for number in run.episodes], {}, "none")
    session = open_folder(clean.write(work / "clean"))
    return {r.request_id or "": (r.status, r.reward, len(r.traces)) for r in session.store.rollouts.values()}


@SETTINGS
@given(run=hostile_runs())
def test_a_hostile_verifiers_run_directory(run: HostileRun) -> None:
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        path = run.write(work / "run")
        every_command(path, work)
        if not run.episodes:
            return
        session = open_folder(path)
        rows = {r.request_id: r for r in session.store.rollouts.values()}
        for episode_id, ending in clean_endings(run, work).items():
            rollout = rows[episode_id]
            assert (rollout.status, rollout.reward, len(rollout.traces)) == ending, f"{episode_id} opened alone ends otherwise"
        for rollout in rows.values():
            if rollout.reason and "cannot be shown" in rollout.reason:
                assert rollout.status is Status.FAILED


@SETTINGS
@given(run=hostile_runs(prime_rl=True))
def test_a_hostile_prime_rl_run(run: HostileRun) -> None:
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        every_command(run.write(work / "out"), work)


@pytest.mark.parametrize("config", [kind for kind in CONFIGS if kind not in ("good", "none")])
def test_each_bad_line_and_config_is_said_and_the_episodes_open(tmp_path: Path, config: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = [b'{"id": "e", "traces": []}\n', *(line + b"\n" for line in BAD_LINES.values())]
    (run / "traces.jsonl").write_bytes(b"".join(lines))
    write_config(run / "configs" / "resolved" / "eval.json", config)
    session = open_folder(run)
    assert [r.request_id for r in session.store.rollouts.values()] == ["e"]
    note = session.truncated or ""
    assert f"{len(BAD_LINES)} line(s) skipped, the first: line 2: nested deeper than JSON is read here" in note, note
    assert "saved config" in note and ("not a regular file" in note or "is a directory" in note or "JSON" in note), note
    code, printed = command("open", "--headless", str(run))
    assert code == 0 and note.split(":")[0] in printed


def tracewatch(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRACEWATCH_HOME": str(cwd / "home"), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "tracewatch.cli", *argv], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def test_a_fifo_or_device_is_refused_with_what_it_is_never_read(tmp_path: Path) -> None:
    """A FIFO blocked every command for ever and /dev/zero read until memory ran out
    (`open /dev/zero` said it did not exist); the subprocess timeout only guards a hang."""
    fifo = tmp_path / "traces.jsonl"
    os.mkfifo(fifo)
    recording = tmp_path / "fifo.twrec"
    os.mkfifo(recording)
    run = tmp_path / "run"
    run.mkdir()
    (run / "traces.jsonl").symlink_to("/dev/zero")
    cases = [
        (("open", "/dev/zero"), "/dev/zero is a character device, not a regular file"),
        (("open", "--headless", str(fifo)), f"{fifo} is a FIFO (a named pipe), not a regular file"),
        (("compare", str(run)), f"{run / 'traces.jsonl'} is a character device, not a regular file"),
        (("tokens", str(recording), "--rollout", "x"), f"{recording} is a FIFO (a named pipe), not a regular file"),
        (("export", str(recording), str(tmp_path / "out.jsonl")), f"{recording} is a FIFO (a named pipe), not a regular file"),
        (("export", str(fifo), str(tmp_path / "out.json"), "--trace-events"), f"{fifo} is a FIFO (a named pipe), not a regular file"),
    ]
    for argv, said in cases:
        done = tracewatch(*argv, cwd=tmp_path)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, (argv, done.stderr)


def test_a_line_or_config_past_its_bound_is_said_not_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_lines, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(run_dir, "MAX_CONFIG_BYTES", 1 << 10)
    run = tmp_path / "run"
    run.mkdir()
    huge = b'{"id": "huge", "traces": [], "pad": "' + b"x" * (3 << 20) + b'"}\n'
    (run / "traces.jsonl").write_bytes(huge + b'{"id": "after", "traces": []}\n')
    write_config(run / "configs" / "resolved" / "eval.json", "good")
    (run / "configs" / "resolved" / "eval.json").write_text('{"pad": "' + "x" * 4096 + '"}')
    session = open_folder(run)
    assert [r.request_id for r in session.store.rollouts.values()] == ["after"]
    note = session.truncated or ""
    assert "1 line(s) skipped, the first: line 1: longer than 1 MiB: not read" in note, note
    assert "eval.json: larger than 0.000976562 MiB; not read as the run's saved config" in note, note


def record_numbers(path: Path, reward: float, logprob: float, tokens: int) -> None:
    """A recording of two rollouts of one task, as a live session writes it: one
    rewarded `reward`, whose answers' logprobs are `logprob` and token count `tokens`."""
    with Recorder(path, meta={"test": True}) as recorder:
        for number, (score, value, count) in enumerate([(reward, logprob, tokens), (0.5, -0.5, 10)]):
            key, trace = f"v/{number}", f"t{number}"
            recorder.rollout(key, "v", 0, {"name": "task"}, number, t=1.0)
            recorder.request(key, f"req-{number}", t=1.0)
            answer = {"parent": 0, "semantic_parents": [], "sampled": True, "message": {"role": "assistant", "content": "a"},
                      "token_ids": [1, 2, 3], "mask": [True] * 3, "logprobs": [value] * 3, "trainer_logprobs": [0.0, value, -1e308]}  # fmt: skip
            recorder.delta(key, {"trace": trace, "open": header(trace), "nodes": [{"parent": None, "semantic_parents": [], "message": {"role": "user", "content": "q"}}, answer], "calls": [{"node": 1, "usage": {"prompt_tokens": count, "completion_tokens": count}}]}, t=2.0)
            recorder.delta(key, {"trace": trace, "set": {"ok": True, "rewards": {"r": {"score": score, "weight": 1.0}}, "num_total_tokens": count}}, t=3.0)
            recorder.reply(key, {**OK, "head": {"id": f"episode-{number}", "ok": True}, "traces": [{"id": trace, "nodes": 2, "calls": 1}]}, t=4.0)


@settings(max_examples=40, deadline=None)
@given(reward=WIRE_NUMBERS, logprob=WIRE_NUMBERS, tokens=st.integers(0, 2**63 - 1))
@example(reward=1e308, logprob=710.0, tokens=2**62)
def test_numbers_that_break_arithmetic_in_a_recording(reward: float, logprob: float, tokens: int) -> None:
    """The same numbers through a recording (what a live session and a scripted
    server write) and every command that reads one."""
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        path = work / "numbers.twrec"
        record_numbers(path, reward, logprob, tokens)
        for argv in (("open", "--headless", str(path)), ("compare", str(path), str(path)), ("replay", "--headless", "--speed", "0", str(path)),
                     ("export", str(path), str(work / "records.jsonl")), ("export", str(path), str(work / "episodes.jsonl"), "--episodes"),
                     ("export", str(path), str(work / "events.json"), "--trace-events"),
                     ("tokens", str(path), "--rollout", "v/0"), ("tokens", str(path), "--rollout", "v/0", "--format", "jsonl")):  # fmt: skip
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)  # numpy's overflow notes would reach a user's stderr
                command(*argv)
