"""The real `vf-eval` of verifiers 0.4.0 as a supervised variant: a local fake model,
a small local taskset (`interop/tw_evalset.py`) on the subprocess runtime, and the tap
injected through a `sitecustomize` streaming every in-process rollout back."""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from interop.fake_model import MODEL, FakeModel
from polling import eventually

from core.recordings.replay import OpenedRecording, OpenedRun
from core.session.config import Config, build_config
from core.session.contracts import VariantState
from core.session.engine import Engine
from core.session.store import Status
from core.taps.eval_variant import INJECT_DIR, EvalVariant

HERE = Path(__file__).resolve().parent
VF_EVAL = str(Path(sys.executable).with_name("vf-eval"))
WAIT = 120.0
EXPECTED = {"calc 17 * 23": 1.0, "calc 1000 / 8 + 6": 0.0, "calc (120 + 37) * 3": 1.0}


@pytest.fixture
def model():
    with FakeModel() as fake:
        yield fake


@pytest.fixture
def eval_env(tmp_path, monkeypatch):
    """What the eval's environment needs: the taskset importable, a key variable, HOME
    in a temporary folder (vf-eval writes there)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE / "interop"), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("FAKE_MODEL_API_KEY", "fake-key")
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def vf_eval(model: FakeModel, out: Path, rollouts: int = 2) -> list[str]:
    return [
        VF_EVAL, "tw_evalset", "-m", MODEL, "--client.base-url", model.base_url,
        "--client.api-key-var", "FAKE_MODEL_API_KEY", "-r", str(rollouts), "--no-rich", "--no-push",
        "-o", str(out), "--env.agent.runtime.type", "subprocess",
    ]


def test_headless_eval_prints_each_rollout_records_it_and_links_the_run_dir(model, eval_env) -> None:
    recording = eval_env / "eval.twrec"
    result = subprocess.run(
        [sys.executable, "-m", "tui.cli", "eval", "--headless", "--record", str(recording), "--", *vf_eval(model, eval_env / "out")],
        capture_output=True, text=True, timeout=WAIT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    done = [line for line in result.stdout.splitlines() if " done · reward " in line]
    assert len(done) == 6
    for label, reward in EXPECTED.items():
        assert sum(f"[{label}] done · reward {reward:g} ·" in line for line in done) == 2
    (traces,) = (eval_env / "out").glob("*/traces.jsonl")
    opened = OpenedRun(traces.parent)
    replayed = OpenedRecording(recording)
    for store in (opened.store, replayed.store):
        rewards = sorted((r.task_label, r.reward) for r in store.rollouts.values())
        assert rewards == sorted((label, reward) for label, reward in EXPECTED.items() for _ in range(2))
    assert sorted(r.rollout_index for r in replayed.store.rollouts.values()) == [0, 0, 0, 1, 1, 1]


async def test_the_eval_streams_live_and_its_run_dir_shows_on_the_card(model, eval_env, monkeypatch) -> None:
    """One model call hangs until released, so a rollout is seen streaming while it
    runs on any machine (the others may be done by then)."""
    monkeypatch.setenv("TW_EVALSET_HANG", "1")
    engine = Engine(Config.for_eval(vf_eval(model, eval_env / "out", rollouts=1), "ev"), session_dir=eval_env / "s")
    await engine.start()
    variant = engine.variants["ev"]
    assert isinstance(variant, EvalVariant)
    try:
        await eventually(lambda: model.hanging.is_set(), WAIT, "the scripted model call hanging")
        seen_running = await eventually(
            lambda: [r for r in engine.store.rollouts.values() if r.status is Status.RUNNING and r.deltas], WAIT, "a rollout streaming"
        )
        assert seen_running[0].note and "model fake-model" in seen_running[0].note
        model.release()
        await asyncio.wait_for(engine.wait(), WAIT)
    finally:
        await engine.shutdown()
    assert variant.state is VariantState.DONE, variant.reason
    assert variant.run_dir and variant.status_line and variant.run_dir in variant.status_line
    assert (Path(variant.run_dir) / "traces.jsonl").exists()
    assert sorted(r.status for r in engine.store.rollouts.values()) == [Status.DONE] * 3


async def test_cancelling_the_eval_sigterms_it_and_it_ends_cancelled(model, eval_env, monkeypatch) -> None:
    monkeypatch.setenv("TW_EVALSET_HANG", "1")
    # vf-eval's own teardown after SIGTERM took over the default 10 s grace on a loaded
    # box (then SIGKILL, exit 137); the grace is what is not under test here
    patient = {"name": "ev", "eval": vf_eval(model, eval_env / "out", rollouts=1), "grace_seconds": WAIT}
    engine = Engine(build_config({"variants": [patient]}, "test", eval_env), session_dir=eval_env / "s")
    await engine.start()
    variant = engine.variants["ev"]
    try:
        await eventually(lambda: model.hanging.is_set(), WAIT, "the scripted model call hanging")
        await eventually(lambda: any(r.status is Status.RUNNING for r in engine.store.rollouts.values()), WAIT, "the hanging rollout shown")
        assert variant.rollout_cancel_unavailable and not engine.cancel_rollout(next(iter(engine.store.rollouts)))
        variant.cancel()
        await asyncio.wait_for(variant.wait(), 2 * WAIT)
    finally:
        await engine.shutdown()
    assert variant.state is VariantState.CANCELLED
    assert variant.outcome_text and "exit code 130" in variant.outcome_text
    assert any(r.status is Status.CANCELLED for r in engine.store.rollouts.values())


async def test_vf_evals_runner_cancels_every_rollout_when_one_is_cancelled() -> None:
    """Why rollout cancel is not offered: verifiers' own `gather_rollouts`."""
    from verifiers.v1.cli.eval.runner import gather_rollouts

    started = asyncio.Event()
    outcomes: list[str] = []

    async def rollout(name: str) -> str:
        try:
            started.set()
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            outcomes.append(name)
            raise
        return name

    one, other = asyncio.ensure_future(rollout("one")), asyncio.ensure_future(rollout("other"))
    gathered = asyncio.ensure_future(gather_rollouts([one, other]))
    await started.wait()
    one.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gathered
    assert sorted(outcomes) == ["one", "other"]


def cli_eval(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "eval", "--headless", "--no-record", "--", *argv],
        capture_output=True, text=True, timeout=WAIT,
    )


def test_an_eval_command_that_is_not_found_is_a_clear_error() -> None:
    result = cli_eval("vf-eval-that-is-not-installed", "x")
    assert result.returncode == 2
    assert "'vf-eval-that-is-not-installed' is not found on PATH" in result.stderr


def test_an_eval_that_exits_at_once_says_so_with_the_tail_of_its_stderr(tmp_path) -> None:
    result = cli_eval(sys.executable, "-c", "import sys; sys.stderr.write('no taskset named nope\\n'); sys.exit(3)")
    assert result.returncode == 1
    assert "exited with code 3 at once: no taskset named nope" in result.stdout


def run_python(code: str, *path: Path, tap: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (INJECT_DIR, *path))}
    if tap:
        env["TRACEWATCH_TAP"] = "tcp://127.0.0.1:9"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=WAIT)


def test_the_tap_chains_to_an_existing_sitecustomize(tmp_path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = 'yes'\n")
    result = run_python("import os, sitecustomize; print(os.environ.get('THEIRS_RAN'), sitecustomize.__file__)", tmp_path)
    ran, module = result.stdout.split()
    assert ran == "yes" and Path(module).parent == INJECT_DIR


def test_without_pyzmq_the_tap_says_so_and_the_program_runs(tmp_path) -> None:
    (tmp_path / "zmq.py").write_text("raise ImportError('No module named zmq', name='zmq')\n")
    result = run_python("import sitecustomize; print(sitecustomize._connect())", tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "None"
    assert "tracewatch tap: cannot stream rollouts to tracewatch: zmq is not installed" in result.stderr


def test_the_injected_tap_imports_only_the_standard_library_pyzmq_msgpack_and_verifiers() -> None:
    tree = ast.parse((INJECT_DIR / "sitecustomize.py").read_text())
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert names - set(sys.stdlib_module_names) <= {"zmq", "msgpack", "verifiers"}
    assert not names & {"core", "tui"}
