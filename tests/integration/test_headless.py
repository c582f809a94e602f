"""The headless runner against real demo servers: what it prints and in what order."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import os
import signal
import subprocess
import sys

from tests.support.demo_sessions import WAIT, demo_variant, write_config
from tests.support.polling import MARGIN, alive, wait_until
from tests.support.repo import REPO
from tests.support.tether import TetheredProcess
from tracewatch.core.engine import headless
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.ports import free_address
from tracewatch.core.session.config import load_config
from tracewatch.launch import main as launch


def test_a_variant_settles_after_its_rollouts_lines(tmp_path, monkeypatch):
    """With every change landing in one look (a long poll), a
    variant's "done" still comes after the lines of the rollouts that made it done."""
    monkeypatch.setattr(headless, "POLL_SECONDS", 120.0)
    config = load_config(write_config(tmp_path, [demo_variant("baseline", ["normal", "failing", "normal"])]))
    engine = LiveSession(config, session_dir=tmp_path / "session")
    out = io.StringIO()
    code = asyncio.run(asyncio.wait_for(headless.run_headless(engine, out=out), 60))
    lines = out.getvalue().splitlines()
    assert code == 1  # one rollout failed
    ended = [i for i, line in enumerate(lines) if line.startswith("baseline/") and ("done" in line or "failed" in line)]
    settled = next(i for i, line in enumerate(lines) if line.startswith("baseline: ") and line.split(": ")[1].split(" ")[0] in ("done", "failed"))
    starting = next(i for i, line in enumerate(lines) if line == "baseline: starting")
    assert len(ended) == 3
    assert starting < min(ended) and max(ended) < settled, lines


def test_ctrl_c_cancels_prints_the_summary_and_exits_130(tmp_path):
    """A real `tracewatch --headless` and a real SIGINT, as Ctrl-C sends it: every run
    is cancelled and its server stopped, the summary is printed, the exit status is
    130, and there is no traceback."""
    config = write_config(tmp_path, [demo_variant("stuck", ["stuck", "stuck"])])
    out_path, err_path = tmp_path / "out.txt", tmp_path / "err.txt"
    env = {**os.environ, "TRACEWATCH_HOME": str(tmp_path / "home")}
    with open(out_path, "w") as out, open(err_path, "w") as err:
        process = TetheredProcess(
            [sys.executable, "-m", "tracewatch.cli", str(config), "--headless", "--no-record"],
            stdout=out, stderr=err, env=env, cwd=REPO,
        )  # fmt: skip
        try:
            wait_until(lambda: out_path.read_text().count("[stuck task] running") == 2, WAIT, "both stuck runs")
            session = next((tmp_path / "home" / "sessions").iterdir())
            record = json.loads(next(session.rglob("supervisor.json")).read_text())
            process.send_signal(signal.SIGINT)
            code = process.wait(timeout=MARGIN * 3)
        finally:
            process.end()
    lines, errors = out_path.read_text().splitlines(), err_path.read_text()
    assert code == 130, (lines, errors)
    assert "Traceback" not in errors and "KeyboardInterrupt" not in errors
    assert "SIGINT: cancelling every run and stopping every server (again to kill them now)" in lines
    assert sum(line.startswith("stuck/") and " cancelled" in line for line in lines) == 2
    assert lines[-1] == "stuck: cancelled; 2 cancelled; mean reward n/a"
    wait_until(lambda: not any(map(alive, (record["supervisor_pid"], record["child_pid"]))), what="the server gone")


def test_the_command_runs_headless_with_the_collector_it_paused_on_again(tmp_path, monkeypatch, capsys):
    """`tracewatch` keeps the collector off while it starts; a headless run has no first
    screen to turn it back on at, so it does as it begins."""
    config = write_config(tmp_path, [demo_variant("baseline", ["normal"])])
    monkeypatch.setenv("TRACEWATCH_HOME", str(tmp_path / "home"))
    collecting: list[bool] = []
    run = headless.run_headless

    async def run_headless(*args, **kwargs):
        collecting.append(gc.isenabled())
        return await run(*args, **kwargs)

    monkeypatch.setattr(headless, "run_headless", run_headless)
    try:
        assert launch([str(config), "--headless", "--no-record"]) == 0
    finally:
        gc.enable()
    assert collecting == [True]
    assert "baseline: done" in capsys.readouterr().out


def test_an_attach_where_nothing_listens_is_one_message_naming_the_address_and_exit_2(tmp_path):
    """Not a session of rollouts that were never sent (6 failed lines, exit 1): one
    line naming the address, nothing counted, nothing recorded, on screen or headless."""
    address = free_address()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c"}\n')
    recording = tmp_path / "attach.twrec"
    for form in (["--headless"], []):
        with TetheredProcess(
            [sys.executable, "-m", "tracewatch.cli", "attach", address, "--tasks", str(tasks), "--rollouts", "2", "--record", str(recording), *form],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        ) as done:  # fmt: skip
            out, err = done.communicate(timeout=WAIT)
        assert done.returncode == 2, (form, out, err)
        assert out == "" and err.splitlines() == [err.strip()] and f"nothing listens at {address}" in err, (form, out, err)
        assert "Traceback" not in err and not recording.exists()
