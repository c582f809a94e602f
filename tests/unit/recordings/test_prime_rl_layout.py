"""Which folder a prime-rl run is: the output dir, its monitors/file/ or its traces/,
the older <out>/traces/, the oldest rollouts/step_N/; anything else named for what it holds."""

from __future__ import annotations

import pytest

from tests.support.prime_rl_monitor import FileMonitor
from tracewatch.core.recordings.prime_rl.layout import PrimeRlLayoutError, RolloutsRun, StreamRun, detect, find_run


@pytest.fixture
def out(tmp_path):
    out = tmp_path / "out"
    monitor = FileMonitor(out, "orchestrator")
    monitor.log_live([{"pending": "d-1", "dispatch": {"id": "d-1"}}])
    monitor.log_metrics({"x": 1.0}, 1)
    monitor.finalize()
    return out


def test_the_output_dir_its_monitor_folder_and_its_traces_folder_are_the_same_run(out):
    runs = [find_run(path) for path in (out, out / "monitors" / "file", out / "monitors" / "file" / "traces")]
    assert runs[0] == runs[1] == runs[2]
    run = runs[0]
    assert isinstance(run, StreamRun)
    assert run.traces == out / "monitors" / "file" / "traces"
    assert run.metrics == out / "monitors" / "file" / "metrics.jsonl"
    assert run.live == run.traces / "live" and run.pending == run.live / "pending"
    assert run.index == run.traces / "stream.index.jsonl" and run.stream == run.traces / "stream"


def test_a_run_that_only_started_has_a_monitor_folder_and_no_traces_yet(tmp_path):
    (tmp_path / "monitors" / "file").mkdir(parents=True)
    (tmp_path / "monitors" / "file" / "metrics.jsonl").write_text("")
    run = find_run(tmp_path)
    assert isinstance(run, StreamRun) and not run.traces.exists()


def test_the_older_traces_folder_at_the_root_is_found(tmp_path):
    (tmp_path / "traces" / "stream").mkdir(parents=True)
    (tmp_path / "metrics.jsonl").write_text("")
    for path in (tmp_path, tmp_path / "traces"):
        run = find_run(path)
        assert isinstance(run, StreamRun) and run.traces == tmp_path / "traces" and run.metrics == tmp_path / "metrics.jsonl"


def test_a_flow_run_keeps_its_live_traces_at_the_root(out):
    (out / "flow.json").write_text("{}")
    assert find_run(out).live == out / "live"


def test_the_oldest_layout_is_handed_to_its_own_reader(tmp_path):
    (tmp_path / "rollouts" / "step_3" / "train" / "all").mkdir(parents=True)
    assert detect(tmp_path) == RolloutsRun(tmp_path / "rollouts")


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda p: None, "does not exist"),
        (lambda p: p.mkdir(), "the folder is empty"),
        (lambda p: p.write_text("x"), "a file, not a folder"),
        (lambda p: (p.mkdir(), (p / "notes.txt").write_text(""), (p / "traces").write_text("")), "'notes.txt', 'traces'"),
        (lambda p: (p.mkdir(), (p / "weird\x1b[2Jname").write_text("")), "'weird\\x1b[2Jname'"),
    ],
)
def test_anything_else_is_refused_naming_what_it_holds(tmp_path, make, said):
    path = tmp_path / "run"
    make(path)
    assert detect(path) is None
    with pytest.raises(PrimeRlLayoutError) as refused:
        find_run(path)
    assert said in str(refused.value) and "not a prime-rl run" in str(refused.value)
