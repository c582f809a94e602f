"""The real `vf-eval` of verifiers 0.4.0 as a supervised variant: a local fake model,
a small local taskset (`tests/support/interop/tw_evalset.py`) on the subprocess runtime, and the tap
injected through a `sitecustomize` streaming every in-process rollout back."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.interop.fake_model import MODEL, FakeModel
from tests.support.polling import eventually, wait_until
from tests.support.repo import FIXTURE, INTEROP
from tests.support.tap_checks import assert_read_in_order_or_counted
from tests.support.tether import TetheredProcess, run_tethered
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording, OpenedRun
from tracewatch.core.session.config import Config, build_config
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.status import Status
from tracewatch.core.supervision.supervisor import group_alive
from tracewatch.core.taps.eval_variant import INJECT_DIR, EvalVariant

pytestmark = pytest.mark.verifiers

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
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(INTEROP), os.environ.get("PYTHONPATH")])))
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
    result = run_tethered(
        [sys.executable, "-m", "tracewatch.cli", "eval", "--headless", "--record", str(recording), "--", *vf_eval(model, eval_env / "out")],
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
    engine = LiveSession(Config.for_eval(vf_eval(model, eval_env / "out", rollouts=1), "ev"), session_dir=eval_env / "s")
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
    engine = LiveSession(build_config({"variants": [patient]}, "test", eval_env), session_dir=eval_env / "s")
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
    return run_tethered(
        [sys.executable, "-m", "tracewatch.cli", "eval", "--headless", "--no-record", "--", *argv],
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
    return run_tethered([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=WAIT)


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


FLOOD = 150_000
"""Deltas a stand-in eval sends: more than its tap queues (100,000)."""
FLOODING_EVAL = f"""
import os, signal, sys
import msgpack, zmq


class Cancelled(Exception):
    pass


def cancelled(*_):
    raise Cancelled


signal.signal(signal.SIGTERM, cancelled)
context = zmq.Context()
push = context.socket(zmq.PUSH)
push.setsockopt(zmq.SNDHWM, 0)  # every delta is kept until it is sent
push.connect(os.environ["TRACEWATCH_TAP"])
deltas = [msgpack.packb({{"trace": "t", "set": {{"i": i, "text": "x" * 200}}}}) for i in range({FLOOD})]
try:
    push.send_multipart([b"begin", b"0", msgpack.packb({{"task_data": {{"id": "big", "prompt": "p"}}, "model": "m"}}), b"0"])
    push.send_multipart([b"delta", b"0", msgpack.packb({{"trace": "t", "open": {{"id": "t"}}}}), b"0"])
    if sys.argv[1:] == ["flood-when-cancelled"]:
        try:
            signal.pause()
        except Cancelled:
            pass
    for delta in deltas:  # packed first: sent faster than they are read
        push.send_multipart([b"delta", b"0", delta, b"0"])
finally:
    push.close(linger=60_000)  # the exit waits until every delta is on its way
    context.term()
sys.exit(130 if sys.argv[1:] else 0)
"""


async def flooding_eval(tmp_path: Path, *args: str) -> tuple[LiveSession, EvalVariant]:
    engine = LiveSession(Config.for_eval([sys.executable, "-c", FLOODING_EVAL, *args], "ev"), session_dir=tmp_path / "s")
    await engine.start()
    variant = engine.variants["ev"]
    assert isinstance(variant, EvalVariant)
    return engine, variant


async def test_an_eval_that_ends_by_itself_is_read_to_its_last_delta(tmp_path) -> None:
    engine, variant = await flooding_eval(tmp_path)
    try:
        await asyncio.wait_for(engine.wait(), WAIT)
    finally:
        await engine.shutdown()
    (rollout,) = engine.store.rollouts.values()
    assert variant.state is VariantState.DONE and variant.reason is None and variant.unread == 0
    assert rollout.deltas == 1 + FLOOD and rollout.assembly.traces["t"]["i"] == FLOOD - 1


async def test_cancelling_an_eval_that_floods_as_it_exits_reads_for_a_while_and_counts_the_rest(tmp_path) -> None:
    """The eval sends its deltas only once cancelled, all at once, so it exits with
    up to a tap queue of them unread: whatever the machine's speed, those read are
    recorded in order, those left are counted and named, and none is both."""
    engine, variant = await flooding_eval(tmp_path, "flood-when-cancelled")
    try:
        rollout = await eventually(lambda: next(iter(engine.store.rollouts.values()), None), WAIT, "the run shown")
        await eventually(lambda: rollout.deltas == 1, WAIT, "the run open")
        variant.cancel()
        await asyncio.wait_for(variant.wait(), WAIT)
    finally:
        await engine.shutdown()
    assert variant.state is VariantState.CANCELLED and rollout.status is Status.CANCELLED
    assert_read_in_order_or_counted(rollout, FLOOD, variant.unread, variant.reason, lambda n: f"the view left {n:,} tap messages unread at the stop (its runs end cancelled anyway)")


@pytest.mark.parametrize("imports", ["import verifiers.v1.env", "import verifiers.v1.cli.eval.runner"])
def test_an_env_the_projects_own_sitecustomize_imported_first_is_still_tapped(model, eval_env, monkeypatch, imports) -> None:
    project = eval_env / "project"
    project.mkdir()
    (project / "sitecustomize.py").write_text(f"{imports}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(project), os.environ["PYTHONPATH"]]))
    result = cli_eval(*vf_eval(model, eval_env / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert sum(" done · reward " in line for line in result.stdout.splitlines()) == 6


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("pass", "no process of the eval imported verifiers' Env with the tap in place (is it a verifiers v1 eval?"),
        ("import verifiers.v1.env", "the tap wrapped verifiers' Env (pid "),
    ],
)
def test_an_eval_that_shows_no_rollout_says_why(code, why) -> None:
    result = cli_eval(sys.executable, "-c", code)
    assert result.returncode == 1
    (summary,) = [line for line in result.stdout.splitlines() if line.startswith("eval: failed; no rollouts")]
    assert f"; no rollout reached tracewatch: {why}" in summary


def test_with_finish_an_eval_outlives_a_killed_viewer_and_its_results_open(model, eval_env, monkeypatch) -> None:
    """The headless viewer is SIGKILLed while a model call hangs; the eval, told to
    finish, runs on once it is released, writes its run directory, and exits 0 under
    its supervisor, which `tracewatch open` then shows."""
    monkeypatch.setenv("TW_EVALSET_HANG", "1")
    monkeypatch.setenv("TRACEWATCH_HOME", str(eval_env / "home"))
    config = eval_env / "tracewatch.toml"
    config.write_text(
        f'[[variants]]\nname = "ev"\neval = {json.dumps(vf_eval(model, eval_env / "out", rollouts=1))}\n'
        'on_viewer_exit = "finish"\n'
    )
    viewer = TetheredProcess([sys.executable, "-m", "tracewatch.cli", "--headless", "--no-record", str(config)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        assert model.hanging.wait(WAIT), "the scripted model call never hung"
        viewer.kill()
        viewer.wait(WAIT)
    finally:
        viewer.end()
    (record_path,) = (eval_env / "home" / "sessions").glob("*/ev-1/supervisor.json")
    model.release()
    record = wait_until(lambda: (r := json.loads(record_path.read_text()))["state"] == "finished" and r, WAIT, "the eval finished")
    assert record["parent_gone_at"] is not None and record["reason"] == "child_exited" and record["exit_code"] == 0
    assert not group_alive(record["child_pgid"])
    (traces,) = (eval_env / "out").glob("*/traces.jsonl")
    opened = OpenedRun(traces.parent)
    assert sorted((r.task_label, r.reward) for r in opened.store.rollouts.values()) == sorted(EXPECTED.items())



class HeadlessEval:
    """`tracewatch eval --name ev --headless OPTIONS -- COMMAND`, what it says read as it says it."""

    def __init__(self, command: list[str], *options: str, env: dict[str, str] | None = None) -> None:
        self.process = TetheredProcess(
            [sys.executable, "-m", "tracewatch.cli", "eval", "--name", "ev", "--headless", *options, "--", *command],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )  # fmt: skip
        self.said: list[str] = []
        threading.Thread(target=lambda: self.said.extend(self.process.stdout or ()), daemon=True).start()

    def line(self, task: str, status: str) -> str | None:
        """The first line that says this task's run is in this status."""
        return next((text for text in list(self.said) if f"[{task}] {status}" in text), None)

    def seen(self) -> str:
        return f"; the viewer said {list(self.said)[-12:]}"


STANDING_EVAL = """
import json, os, pathlib, sys, time
import msgpack, zmq
from tracewatch_guest import framing

fixture, flags = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
rows = [json.loads(line) for line in (fixture / "deltas.jsonl").read_text().splitlines()]
deltas = [msgpack.packb(row["delta"]) for row in rows if row["request"] == "run0"]
reply = msgpack.packb(next(r["reply"] for r in json.loads((fixture / "replies.json").read_text()) if r["request"] == "run0"))
push = zmq.Context().socket(zmq.PUSH)
push.connect(os.environ[framing.ADDRESS_VAR])


def send(kind, run, payload):
    push.send_multipart(framing.encode(kind, run, payload, 0))


def wait_for(flag):
    while not (flags / flag).exists():
        time.sleep(0.05)


for run, task in ((b"0", "ending"), (b"1", "live")):
    send(framing.BEGIN, run, msgpack.packb(framing.begin_payload({"id": task, "prompt": "p"}, "m", None)))
    send(framing.DELTA, run, deltas[0])
wait_for("viewer-stopped")
for delta in deltas[1:]:
    send(framing.DELTA, b"0", delta)
send(framing.REPLY, b"0", reply)
(flags / "ending-sent").touch()
wait_for("finish")
for delta in deltas[1:]:
    send(framing.DELTA, b"1", delta)
send(framing.REPLY, b"1", reply)
push.close(linger=60_000)
"""


def test_a_headless_eval_view_resumed_after_a_run_ended_ends_it_and_the_live_run_goes_on(tmp_path) -> None:
    """The viewer (`tracewatch eval --headless`) suspended (SIGSTOP) while a run of
    the eval ends: resumed, with nothing more from the eval, it ends that run as its
    reply says within a deadline, and the run still live goes on and ends when the
    eval ends it."""
    flags = tmp_path / "flags"
    flags.mkdir()
    view = HeadlessEval([sys.executable, "-c", STANDING_EVAL, str(FIXTURE), str(flags)], "--no-record")
    viewer, said, line, seen = view.process, view.said, view.line, view.seen

    try:
        wait_until(lambda: line("ending", "running") and line("live", "running"), WAIT, lambda: "both runs seen running" + seen())
        viewer.send_signal(signal.SIGSTOP)
        (flags / "viewer-stopped").touch()
        wait_until(lambda: (flags / "ending-sent").exists(), WAIT, "the run's end sent while the viewer was stopped")
        viewer.send_signal(signal.SIGCONT)
        wait_until(lambda: line("ending", "done"), WAIT, lambda: "the ended run ended in the resumed viewer" + seen())
        assert not any(f"[live] {status}" in text for text in said for status in ("done", "failed", "unobserved", "cancelled")), seen()
        (flags / "finish").touch()
        wait_until(lambda: line("live", "done"), WAIT, lambda: "the live run ended as the eval ended it" + seen())
        assert viewer.wait(WAIT) == 0, seen()
    finally:
        viewer.send_signal(signal.SIGCONT)
        viewer.end()


PAD = 3_000_000
"""Characters more in each of the hanging task's 6 tool turns: far more than the socket
buffers between a stopped viewer and the eval hold, and more messages than the tap's
queue (8), so it drops; a queue that small still keeps up with a running viewer under load."""
PADDED = "calc (120 + 37) * 3"


def test_a_headless_eval_view_stopped_while_the_eval_ends_says_what_it_missed_and_ends_the_run(model, eval_env, monkeypatch) -> None:
    """The viewer (`tracewatch eval --headless`) suspended (SIGSTOP) while the real
    vf-eval's last rollout streams far more than the tap may queue, and until the
    eval exited: resumed, with nothing more to come from the eval, it says within a
    few seconds how many messages it missed and ends that run *unobserved*, view
    incomplete, its end among them; the runs it saw whole are done; the recording
    it wrote ends each run the same."""
    monkeypatch.setenv("TW_EVALSET_HANG", "1")
    monkeypatch.setenv("TW_EVALSET_PAD", str(PAD))
    monkeypatch.setenv("TW_EVALSET_TOOLS", "6")
    monkeypatch.setenv("TRACEWATCH_TAP_QUEUE", "8")
    monkeypatch.setenv("TRACEWATCH_HOME", str(eval_env / "home"))
    recording = eval_env / "view.twrec"
    view = HeadlessEval(vf_eval(model, eval_env / "out", rollouts=1), "--record", str(recording))
    viewer, said, line, seen = view.process, view.said, view.line, view.seen

    try:
        assert model.hanging.wait(WAIT), "the scripted model call never hung" + seen()
        wait_until(lambda: line(PADDED, "") and line("calc 17 * 23", "done") and line("calc 1000 / 8 + 6", "done"), WAIT,
                   lambda: "the padded run seen, the others done" + seen())  # fmt: skip
        viewer.send_signal(signal.SIGSTOP)
        model.release()
        record_path = wait_until(lambda: next((eval_env / "home" / "sessions").glob("*/ev-1/supervisor.json"), None), WAIT, "the eval's supervisor record")
        wait_until(lambda: json.loads(record_path.read_text())["state"] == "finished", WAIT, "the eval finished while the viewer was stopped")
        viewer.send_signal(signal.SIGCONT)
        ended = wait_until(lambda: line(PADDED, "unobserved"), 30, lambda: "the resumed viewer ended the run it missed the end of" + seen())
        assert viewer.wait(WAIT) is not None, seen()
    finally:
        viewer.send_signal(signal.SIGCONT)
        model.release()
        viewer.end()
    assert "view incomplete: the eval's tap dropped " in ended and "messages for this view, the run's end among them (the run itself is the eval's)" in ended, seen()
    assert not any(line(task, status) for task in EXPECTED for status in ("failed", "cancelled")), seen()
    (summary,) = [text for text in said if text.startswith("ev: done; ")]
    assert "2 done, 1 unobserved;" in summary and "the eval's tap dropped " in summary, seen()
    opened = OpenedRecording(recording)
    endings = {r.task_label: (r.status, r.reason) for r in opened.store.rollouts.values()}
    assert {task: status for task, (status, _) in endings.items()} == {task: Status.UNOBSERVED if task == PADDED else Status.DONE for task in EXPECTED}, endings
    assert (reason := endings[PADDED][1]) is not None and reason in ended, endings


TAPPED_HEAD = """
import json, pathlib, subprocess, sys, time
import msgpack
import sitecustomize  # the eval tap itself, first on the PYTHONPATH tracewatch gives the eval
from tracewatch_guest import framing

fixture, flags = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
rows = [json.loads(line) for line in (fixture / "deltas.jsonl").read_text().splitlines()]
deltas = [msgpack.packb(row["delta"]) for row in rows if row["request"] == "run0"]
reply = msgpack.packb(next(r["reply"] for r in json.loads((fixture / "replies.json").read_text()) if r["request"] == "run0"))
sender = sitecustomize._connect()


def wait_for(flag):
    while not (flags / flag).exists():
        time.sleep(0.05)

"""
"""A stand-in eval's start: the fixture's first run, the tap's own sender, a wait for a flag file."""

TAPPED_EVAL = TAPPED_HEAD + """
ending, live = sender.new_run(), sender.new_run()  # named as the tap names runs: its loss speaks for them
sender.send(framing.BEGIN, ending, msgpack.packb(framing.begin_payload({"id": "ending", "prompt": "p"}, "m", None)))
sender.send(framing.DELTA, ending, msgpack.packb({"trace": "t", "open": {"id": "t"}}))
sender.send(framing.BEGIN, live, msgpack.packb(framing.begin_payload({"id": "live", "prompt": "p"}, "m", None)))
sender.send(framing.DELTA, live, deltas[0])
wait_for("viewer-stopped")
for i in range(16_000):  # 64 MB: far past the socket buffers of a stopped viewer
    sender.send(framing.DELTA, ending, msgpack.packb({"trace": "t", "set": {"i": i, "text": "x" * 4000}}))
sender.send(framing.REPLY, ending, msgpack.packb(framing.failed_reply("the stand-in's run ended")))
(flags / "ending-sent").write_text(str(sender.dropped))
wait_for("finish")
for delta in deltas[1:]:
    sender.send(framing.DELTA, live, delta)
sender.send(framing.REPLY, live, reply)
"""


def stop_while_a_run_ends(view: HeadlessEval, flags: Path) -> str:
    """The viewer stopped (SIGSTOP) once both runs are seen running, while the stand-in
    eval streams the `ending` run's end past the tap's queue; resumed, it must end that
    run *unobserved* (its line, returned) while `live` goes on, and end `live` done once
    the eval finishes it."""
    viewer, said, line, seen = view.process, view.said, view.line, view.seen
    try:
        wait_until(lambda: line("ending", "running") and line("live", "running"), WAIT, lambda: "both runs seen running" + seen())
        viewer.send_signal(signal.SIGSTOP)
        (flags / "viewer-stopped").touch()
        dropped = wait_until(lambda: (flags / "ending-sent").exists() and int((flags / "ending-sent").read_text() or 0), WAIT, "the run's end sent")
        assert dropped > 0, "the tap dropped nothing for the stopped viewer"
        viewer.send_signal(signal.SIGCONT)
        ended: str = wait_until(lambda: line("ending", "unobserved"), 30, lambda: "the resumed viewer told what it missed" + seen())
        assert not any(f"[live] {status}" in text for text in said for status in ("done", "failed", "unobserved", "cancelled")), seen()
        (flags / "finish").touch()
        wait_until(lambda: line("live", "done"), WAIT, lambda: "the live run ended as the eval ended it" + seen())
        viewer.wait(WAIT)
    finally:
        viewer.send_signal(signal.SIGCONT)
        viewer.end()
    return ended


def test_an_eval_view_resumed_while_the_eval_runs_is_told_what_the_tap_dropped_and_the_live_run_goes_on(tmp_path) -> None:
    """The viewer (`tracewatch eval --headless`) suspended (SIGSTOP) while a run
    streams far more than the eval tap may queue and ends, another run left live:
    resumed, with nothing more from the eval, it is told by the tap on its own what
    was dropped, ends that run *unobserved* within a deadline, and the live run goes
    on and ends done when the eval ends it."""
    flags = tmp_path / "flags"
    flags.mkdir()
    view = HeadlessEval([sys.executable, "-c", TAPPED_EVAL, str(FIXTURE), str(flags)], "--no-record", env={**os.environ, "TRACEWATCH_TAP_QUEUE": "100"})
    said, seen = view.said, view.seen
    ended = stop_while_a_run_ends(view, flags)
    assert "view incomplete: the eval's tap dropped " in ended and "the run's end among them (the run itself is the eval's)" in ended, seen()
    (summary,) = [text for text in said if text.startswith("ev: done; ")]
    assert "1 done, 1 unobserved;" in summary and "the eval's tap dropped " in summary, seen()


TWO_PROCESS_EVAL = TAPPED_HEAD + """
if sys.argv[3:] == ["worker"]:  # a process of its own, started afresh: it counts its runs from 0 too
    live = sender.new_run()
    sender.send(framing.BEGIN, live, msgpack.packb(framing.begin_payload({"id": "live", "prompt": "p"}, "m", None)))
    sender.send(framing.DELTA, live, deltas[0])
    (flags / "worker-begun").touch()
    wait_for("finish")
    for delta in deltas[1:]:
        sender.send(framing.DELTA, live, delta)
    sender.send(framing.REPLY, live, reply)
    sys.exit(0)
worker = subprocess.Popen([sys.executable, sys.argv[4], *sys.argv[1:3], "worker"])
wait_for("worker-begun")
ending = sender.new_run()
sender.send(framing.BEGIN, ending, msgpack.packb(framing.begin_payload({"id": "ending", "prompt": "p"}, "m", None)))
sender.send(framing.DELTA, ending, msgpack.packb({"trace": "t", "open": {"id": "t"}}))
wait_for("viewer-stopped")
for i in range(16_000):  # 64 MB: far past the socket buffers of a stopped viewer
    sender.send(framing.DELTA, ending, msgpack.packb({"trace": "t", "set": {"i": i, "text": "x" * 4000}}))
sender.send(framing.REPLY, ending, msgpack.packb(framing.failed_reply("the stand-in's run ended")))
(flags / "ending-sent").write_text(str(sender.dropped))
worker.wait()
"""


def test_a_loss_in_one_process_of_an_eval_leaves_another_processs_live_run_going(tmp_path) -> None:
    """An eval whose rollouts run in two processes, each with the tap (each counts its
    runs from 0): one process's tap drops messages for the stopped viewer and tells
    the loss, naming its own running runs. The resumed viewer ends that process's run
    *unobserved*, and the other process's live run, which that loss does not name,
    goes on and ends done: the two runs are told apart, and a loss speaks for its own
    process's runs only."""
    flags = tmp_path / "flags"
    flags.mkdir()
    script = tmp_path / "eval.py"
    script.write_text(TWO_PROCESS_EVAL)
    view = HeadlessEval([sys.executable, "-c", TWO_PROCESS_EVAL, str(FIXTURE), str(flags), "main", str(script)], "--no-record", env={**os.environ, "TRACEWATCH_TAP_QUEUE": "100"})
    said, seen = view.said, view.seen
    ended = stop_while_a_run_ends(view, flags)
    assert "the run's end among them" in ended, seen()
    (summary,) = [text for text in said if text.startswith("ev: done; ")]
    assert "1 done, 1 unobserved;" in summary, seen()
