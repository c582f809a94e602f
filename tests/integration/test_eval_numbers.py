"""What tracewatch says of a real `vf-eval` run (verifiers 0.4.0, the fake model, the
`tw_evalset` taskset) against what the run itself recorded: its rollouts' own timing
in the run directory, its tasks, and every rollout's phase times. One eval, run once
(three tasks, three rollouts each, two at a time), is read by each test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from textual.widgets import Static

from tests.app.test_app_recordings import card_text
from tests.support.interop.fake_model import MODEL, FakeModel
from tests.support.polling import until
from tests.support.repo import INTEROP
from tests.support.tether import run_tethered
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording, OpenedRun
from tracewatch.core.session.compare import compare
from tracewatch.core.session.config import Config, build_config
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.phases import percentile
from tracewatch.core.session.status import Status
from tracewatch.core.supervision.child import SupervisedChild
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.chrome.screens import ConfirmScreen
from tracewatch.tui.run_views.logs_view import LogLines, LogsView

pytestmark = pytest.mark.verifiers

VF_EVAL = str(Path(sys.executable).with_name("vf-eval"))
WAIT = 180.0
TASKS, ROLLOUTS, CONCURRENT = 3, 3, 2


class EvalRun:
    """The headless session's output, its recording and vf-eval's run directory."""

    def __init__(self, stdout: str, recording: Path, run_dir: Path) -> None:
        self.stdout = stdout
        self.recording = recording
        self.run_dir = run_dir
        self.episodes = [json.loads(line) for line in (run_dir / "traces.jsonl").read_text().splitlines() if line.strip()]

    def recorded_seconds(self) -> dict[str, list[float]]:
        """Per task name, each rollout's own time as vf-eval recorded it: from its
        trace's timing start to its last span's end."""
        seconds: dict[str, list[float]] = {}
        for episode in self.episodes:
            timing = episode["traces"][0]["timing"]
            end = max(span["end"] for span in timing.values() if isinstance(span, dict))
            seconds.setdefault(episode["task"]["data"]["name"], []).append(end - timing["start"])
        return {name: sorted(values) for name, values in seconds.items()}


def eval_env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(INTEROP), os.environ.get("PYTHONPATH")])),
        "FAKE_MODEL_API_KEY": "fake-key",
        "HOME": str(home),
    }


def vf_eval(model: FakeModel, out: Path, *extra: str) -> list[str]:
    return [
        VF_EVAL, "tw_evalset", "-m", MODEL, "--client.base-url", model.base_url,
        "--client.api-key-var", "FAKE_MODEL_API_KEY", "-r", str(ROLLOUTS), "-c", str(CONCURRENT),
        "--no-rich", "--no-push", "-o", str(out), "--env.agent.runtime.type", "subprocess", *extra,
    ]


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory) -> EvalRun:
    home = tmp_path_factory.mktemp("eval")
    recording = home / "eval.twrec"
    with FakeModel() as model:
        result = run_tethered(
            [sys.executable, "-m", "tracewatch.cli", "eval", "--headless", "--name", "ev", "--record", str(recording), "--", *vf_eval(model, home / "out")],
            capture_output=True, text=True, timeout=WAIT, env=eval_env(home),
        )
    assert result.returncode == 0, result.stdout + result.stderr
    (traces,) = (home / "out").glob("*/traces.jsonl")
    return EvalRun(result.stdout, recording, traces.parent)


def test_elapsed_is_each_rollouts_own_recorded_time_not_its_wait_for_a_slot(eval_run) -> None:
    recorded = eval_run.recorded_seconds()
    assert len(eval_run.episodes) == TASKS * ROLLOUTS
    done = [line for line in eval_run.stdout.splitlines() if " done · reward " in line]
    printed: dict[str, list[float]] = {}
    for line in done:
        name = line.partition("[")[2].partition("]")[0]
        printed.setdefault(name, []).append(float(line.rpartition(" · ")[2].rstrip("s")))
    assert sorted(printed) == sorted(recorded)
    for name, seconds in recorded.items():  # each cut to the tenth shown, never rounded up (core/run/durations)
        cut = all(own - 0.1 < shown <= own for shown, own in zip(sorted(printed[name]), seconds))
        assert cut, f"headless lines of {name}: {sorted(printed[name])} for {seconds}"

    for session in (OpenedRecording(eval_run.recording), OpenedRun(eval_run.run_dir)):
        rollouts = list(session.store.rollouts.values())
        for name, seconds in recorded.items():
            own = sorted(r.elapsed(0.0) for r in rollouts if r.task_label == name)
            assert own == pytest.approx(seconds, abs=1e-6), f"{type(session).__name__}: the table's elapsed of {name}"
        for (_, name), cells in compare({"ev": rollouts}).tasks.items():
            assert sorted(cells["ev"].seconds) == pytest.approx(recorded[name], abs=1e-6), f"Compare's time of {name}"


def test_no_more_rollouts_run_at_once_than_the_evals_slots(eval_run) -> None:
    """The series the store keeps of running rollouts (what the status line and the
    timeline count) holds about vf-eval's `max_concurrent`, not every rollout sent:
    the others were waiting for a slot, not running."""
    store = OpenedRecording(eval_run.recording).store
    series = store.series
    assert series.first is not None and series.last is not None
    columns = series.columns("ev", series.first, series.last + 1.0, 400)
    # a finished rollout runs for its recorded timing, which vf-eval's slot holds (its
    # reply, sent after the slot is freed, may land after the next rollout began)
    assert max(column.running for column in columns) == CONCURRENT
    assert max(column.waiting for column in columns) >= TASKS * ROLLOUTS - CONCURRENT - 1


def test_a_run_directory_groups_rollouts_by_task_and_matches_the_live_recording(eval_run, tmp_path) -> None:
    opened = OpenedRun(eval_run.run_dir).store.rollouts.values()
    by_task: dict[int, list[int]] = {}
    for rollout in opened:
        by_task.setdefault(rollout.task_index, []).append(rollout.rollout_index)
    assert sorted(map(sorted, by_task.values())) == [list(range(ROLLOUTS))] * TASKS, "each task's rollouts numbered 0..k-1"

    result = subprocess.run(
        [sys.executable, "-m", "tracewatch.cli", "compare", str(eval_run.recording), str(eval_run.run_dir)],
        capture_output=True, text=True, timeout=WAIT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    summaries = [line for line in lines if "pass@k" in line]
    assert len(summaries) == 2 and all(f"/{TASKS} tasks" in line and f"over {TASKS * ROLLOUTS} scored" in line for line in summaries), lines
    assert lines[-1] == f"variants disagree on 0 of {TASKS} tasks", "the same task matched in the recording and the run directory"
    rows = [line for line in lines if line.startswith("calc ")]
    assert len(rows) == TASKS and all(line.count(f"/{ROLLOUTS})") == 2 for line in rows), rows


def test_a_run_directory_with_no_episodes_says_so(tmp_path) -> None:
    """As vf-eval leaves it before its first episode lands: `save_config` writes the
    config and a fresh, empty traces.jsonl."""
    from verifiers.v1.cli.output import save_config
    from verifiers.v1.configs.cli.eval import EvalConfig

    run_dir = tmp_path / "run"
    save_config(EvalConfig(model=MODEL), run_dir)
    session = OpenedRun(run_dir)
    assert session.readonly_reason and "no episodes" in session.readonly_reason
    result = subprocess.run(
        [sys.executable, "-m", "tracewatch.cli", "open", "--headless", str(run_dir)], capture_output=True, text=True, timeout=WAIT
    )
    assert f"no episodes: {run_dir / 'traces.jsonl'} holds none yet" in result.stdout, result.stdout + result.stderr


def test_an_opened_recordings_phase_percentiles_cover_every_finished_rollout_from_the_start(eval_run) -> None:
    """The Timing tab's per-variant p50/p95 (`RolloutStore.stats`) of a recording opened
    offline are over every rollout the run finished, before the cursor visits any, and
    stay so as it visits them."""
    agent = sorted(
        episode["traces"][0]["timing"]["agent"]["end"] - episode["traces"][0]["timing"]["agent"]["start"]
        for episode in eval_run.episodes
    )
    expected = (percentile(agent, 0.5), percentile(agent, 0.95))
    session = OpenedRecording(eval_run.recording)
    assert session.store.stats("ev").phases["agent"] == pytest.approx(expected, abs=1e-6)
    for key in list(session.store.rollouts)[:3]:
        session.load(key)
        assert session.store.stats("ev").phases["agent"] == pytest.approx(expected, abs=1e-6), f"after visiting {key}"


async def test_a_failed_evals_card_and_logs_say_why_in_the_evals_own_words(eval_run, tmp_path, monkeypatch) -> None:
    """vf-eval refuses a run directory that already holds results; the card says so
    (its stderr's tail), not only its exit code, and the Logs tab shows what it wrote."""
    argv = [VF_EVAL, "tw_evalset", "-m", MODEL, "--no-rich", "--no-push", "-o", str(eval_run.run_dir.parent), "--run.name", eval_run.run_dir.name]
    engine = LiveSession(Config.for_eval(argv, "again"), session_dir=tmp_path / "s")
    app = TracewatchApp(engine)
    for name in ("PYTHONPATH", "HOME"):
        monkeypatch.setenv(name, eval_env(tmp_path)[name])
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: engine.variants["again"].state is VariantState.FAILED, "the eval failing", timeout=WAIT)
        await until(pilot, lambda: "already contains results" in card_text(app.cards["again"]), "the card saying why")
        assert "exit code 1" in card_text(app.cards["again"])
        await pilot.press("3")
        log = app.query_one(LogsView).query_one(LogLines)
        await until(pilot, lambda: any("already contains results" in line for line in log.lines), "the Logs tab showing vf-eval's output")


async def test_cancelling_an_eval_asks_in_vf_evals_terms_and_it_ends_as_asked(tmp_path, monkeypatch) -> None:
    """The dialog says what happens to vf-eval (SIGTERM, exit 130, its rollouts end
    with it), not a server's runs cancelled over the wire; and that is what happens."""
    for name, value in eval_env(tmp_path).items():
        if name in ("PYTHONPATH", "HOME", "FAKE_MODEL_API_KEY"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("TW_EVALSET_HANG", "1")
    with FakeModel() as model:
        config = build_config({"variants": [{"name": "ev", "eval": vf_eval(model, tmp_path / "out"), "grace_seconds": WAIT}]}, "test", tmp_path)
        engine = LiveSession(config, session_dir=tmp_path / "s")
        app = TracewatchApp(engine)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: model.hanging.is_set() and app.table.row_count, "a rollout hanging on the model", timeout=WAIT)
            await pilot.press("x")
            screen = await until(pilot, lambda: app.screen if isinstance(app.screen, ConfirmScreen) else None, "the confirm dialog")
            question = screen.question.plain
            assert "vf-eval gets SIGTERM" in question and "exits 130" in question and "over the wire" not in question, question
            await pilot.press("y")
            variant = engine.variants["ev"]
            await until(pilot, lambda: variant.state is VariantState.CANCELLED, "the eval cancelled", timeout=2 * WAIT)
            assert variant.outcome_text and "exit code 130" in variant.outcome_text


async def test_a_rollout_waiting_for_a_vf_eval_slot_is_queued_never_stalled(tmp_path, monkeypatch) -> None:
    """Task 2's rollouts hang on the model: two take vf-eval's two slots and hang there
    (running, silent: stalled past the variant's 1 s), the third waits for a slot for as
    long. Its wait is not a stall: it is queued, not running, and no place counts it
    stalled; it runs once a slot frees."""
    for name, value in eval_env(tmp_path).items():
        if name in ("PYTHONPATH", "HOME", "FAKE_MODEL_API_KEY"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("TW_EVALSET_HANG", "1")
    with FakeModel() as model:
        config = build_config({"variants": [{"name": "ev", "eval": vf_eval(model, tmp_path / "out"), "stall_seconds": 1.0}]}, "test", tmp_path)
        engine = LiveSession(config, session_dir=tmp_path / "s")
        store = engine.store
        app = TracewatchApp(engine)
        async with app.run_test(size=(160, 48)) as pilot:
            hanging = lambda: [r for r in store.rollouts.values() if r.task_index == 2 and not r.status.finished]  # noqa: E731
            await until(
                pilot, lambda: len(store.rollouts) == TASKS * ROLLOUTS and sum(r.status.finished for r in store.rollouts.values()) == 6 and len(hanging()) == 3,
                "task 2's three rollouts left, the others done", timeout=WAIT,
            )
            in_slots = lambda: {r.key for r in hanging() if r.trace_ids}  # noqa: E731
            running = await until(pilot, lambda: in_slots() if len(in_slots()) == 2 else None, "two in slots, hanging")
            (waiting,) = (r for r in hanging() if r.key not in running)
            await until(pilot, lambda: store.clock() - waiting.created_at > 2.0 and {r.key for r in store.stalled()} >= running, "the two in slots stalled, one waiting 2 s")
            assert not waiting.trace_ids and waiting.phase == "queued" and app.table.cell_text(waiting.key, "activity") == "queued"
            assert {r.key for r in store.stalled()} == running
            status = app.query_one("#status", Static)
            await until(pilot, lambda: " · 2 stalled" in str(status.render()), "the status line's count")
            assert "2 running · 2 stalled" in str(status.render())
            await pilot.press("slash", *"status:stalled", "enter")
            await until(pilot, lambda: sorted(app.table.ordered_keys) == sorted(running), "status:stalled: the two in slots")
            model.release()
            await until(pilot, lambda: engine.variants["ev"].state is VariantState.DONE, "the eval done once released", timeout=WAIT)
            assert waiting.status is Status.DONE and waiting.elapsed(0.0) < waiting.ended_at - waiting.created_at, "it ran from its slot, not from its wait"


async def test_a_card_drawn_while_the_eval_is_being_started_says_no_pid_and_does_not_crash(tmp_path, monkeypatch) -> None:
    """The cards redraw every second, also while vf-eval's supervisor is being started
    in a worker thread: the variant has its child then, not yet its process, and the
    card says no pid rather than asking a child that has not started (which raised
    and stopped the app)."""
    starting, release = threading.Event(), threading.Event()
    real_start = SupervisedChild.start

    def slow_start(self: SupervisedChild) -> int:
        starting.set()
        release.wait(WAIT)
        return real_start(self)

    monkeypatch.setattr(SupervisedChild, "start", slow_start)
    config = build_config({"variants": [{"name": "ev", "eval": [sys.executable, "-c", "print('done')"]}]}, "test", tmp_path)
    engine = LiveSession(config, session_dir=tmp_path / "s")
    app = TracewatchApp(engine)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, starting.is_set, "vf-eval's supervisor being started")
            begun = engine.store.clock()
            await until(pilot, lambda: engine.store.clock() - begun > 2.5, "two redraws of the cards")
            assert "pid" not in card_text(app.cards["ev"]) and engine.variants["ev"].pid is None
            release.set()
            await until(pilot, lambda: engine.variants["ev"].state in (VariantState.DONE, VariantState.FAILED), "the eval ended", timeout=WAIT)
    finally:
        release.set()


def test_a_run_directorys_trace_events_end_each_rollout_at_its_own_end(eval_run, tmp_path) -> None:
    """Before, an opened run's rollouts were queued at the moment it was opened, so each
    slice ran to the export's moment, and the file's first episode (the first to finish)
    was the origin, so earlier starters had a negative `ts`."""
    out = tmp_path / "trace.json"
    result = subprocess.run(
        [sys.executable, "-m", "tracewatch.cli", "export", str(eval_run.run_dir), str(out), "--trace-events"],
        capture_output=True, text=True, timeout=WAIT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    events = [event for event in json.loads(out.read_text())["traceEvents"] if "ts" in event]
    assert min(event["ts"] for event in events) == 0, "the run's first time is the origin"
    slices = sorted(event["dur"] / 1e6 for event in events if event["name"] == "rollout")
    recorded = sorted(seconds for per_task in eval_run.recorded_seconds().values() for seconds in per_task)
    assert slices == pytest.approx(recorded, abs=1e-5), "each rollout's slice is its own recorded time"
