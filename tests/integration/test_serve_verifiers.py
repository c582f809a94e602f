"""The verifiers launcher, run as the app runs it: a subprocess of the venv's Python
with verifiers 0.4.0, a tiny taskset on PYTHONPATH, HOME in a temporary directory."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repo import INTEROP, REPO
from tests.support.tether import Tether, run_tethered
from tracewatch.core.wire.client import EnvClient

pytestmark = pytest.mark.verifiers

ENV_TOML = """
[env.taskset]
id = "serve_verifiers_arith"
[env.agent.runtime]
type = "subprocess"
"""


@pytest.fixture
def env_config(tmp_path: Path) -> Path:
    path = tmp_path / "env.toml"
    path.write_text(ENV_TOML)
    return path


@pytest.fixture
def child_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {**os.environ, "HOME": str(home), "PYTHONPATH": os.pathsep.join([str(INTEROP), str(REPO)])}


def launch(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "tracewatch_guest.serve_verifiers", *args]
    return run_tethered(argv, env=env, capture_output=True, text=True, timeout=120)


def test_write_tasks_dumps_each_task_data_as_the_server_rebuilds_it(env_config, child_env, tmp_path, monkeypatch):
    out = tmp_path / "out" / "tasks.jsonl"
    result = launch(["--env-config", str(env_config), "--write-tasks", str(out)], child_env)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["idx"], r["id"], r["prompt"], r["answer"]) for r in rows] == [
        (0, "arith-0", "What is 0 + 0?", 0),
        (1, "arith-1", "What is 1 + 1?", 2),
        (2, "arith-2", "What is 2 + 2?", 4),
    ]
    # the server validates task_data into the taskset's data type: it must round-trip whole
    monkeypatch.syspath_prepend(str(INTEROP))
    from serve_verifiers_arith import ArithData

    assert all(ArithData.model_validate(r).model_dump(mode="json") == r for r in rows)
    assert "wrote 3 tasks" in result.stderr


def test_write_tasks_limit(env_config, child_env, tmp_path):
    out = tmp_path / "tasks.jsonl"
    result = launch(["--env-config", str(env_config), "--write-tasks", str(out), "--limit", "2"], child_env)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["arith-0", "arith-1"]


def test_a_vf_eval_config_serves_its_env_block_and_says_what_it_ignores(tmp_path, child_env):
    path = tmp_path / "eval.toml"
    path.write_text('model = "gpt-4.1-mini"\nnum_examples = 5\n[env.taskset]\nid = "serve_verifiers_arith"\nnum_tasks = 1\n')
    out = tmp_path / "tasks.jsonl"
    result = launch(["--env-config", str(path), "--write-tasks", str(out)], child_env)
    assert result.returncode == 0, result.stderr
    assert len(out.read_text().splitlines()) == 1
    assert f"ignoring model, num_examples in {path}" in result.stderr
    assert 'set [env.agent.runtime] type = "subprocess"' in result.stderr  # verifiers' default is remote


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[serve]\nmax_concurrent = 2\n", "expected an [env] table"),
        ("[env.taskset]\nid = 'no_such_taskset_here'\n", "taskset 'no_such_taskset_here' not found"),
        ("[env.agent.runtime]\ntype = 'subprocess'\n", "expected env.taskset.id"),
        ("[env\n", "invalid TOML"),
        (ENV_TOML + "[serve]\nmax_concurrent = 0\n", "serve.max_concurrent"),
    ],
)
def test_bad_env_configs_say_what_and_where(tmp_path, child_env, toml, expected):
    path = tmp_path / "env.toml"
    path.write_text(toml)
    result = launch(["--env-config", str(path), "--write-tasks", str(tmp_path / "t.jsonl")], child_env)
    assert result.returncode == 2
    assert expected in result.stderr and str(path) in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "t.jsonl").exists()


def test_without_verifiers_it_says_how_to_get_it(env_config, child_env):
    # `-S` leaves out site-packages: a Python without verifiers (or tracewatch), where
    # the launcher still runs as a plain script
    argv = [sys.executable, "-S", str(REPO / "tracewatch_guest" / "serve_verifiers.py"), "--env-config", str(env_config)]
    result = run_tethered(argv, env={**child_env, "PYTHONPATH": ""}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "verifiers is not installed" in result.stderr and sys.executable in result.stderr
    assert "pip install 'verifiers==0.4.0'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("workers", [None, 2], ids=["one-server", "pool"])
async def test_serves_health_and_stops_cleanly_on_sigterm(env_config, child_env, workers):
    args = ["--env-config", str(env_config), "--address", "tcp://127.0.0.1:0"]
    if workers is not None:
        args += ["--workers", str(workers)]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tracewatch_guest.serve_verifiers", *args,
        env=child_env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )
    tether = Tether(group=process.pid)  # the server and its pool's workers end with the test run
    client = None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=120)
        address = line.decode().strip()
        assert address.startswith("tcp://127.0.0.1:") and not address.endswith(":0")
        client = EnvClient(address)
        await client.wait_for_server_startup(timeout=60)
        assert await client.health()
    finally:
        if client is not None:
            await client.close()
        if process.returncode is None:
            os.kill(process.pid, signal.SIGTERM)
        try:
            code = await asyncio.wait_for(process.wait(), timeout=30)
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            raise
        finally:
            tether.release()
    stderr = (await process.stderr.read()).decode()
    assert code == 0, stderr
