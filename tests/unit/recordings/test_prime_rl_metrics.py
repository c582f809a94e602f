"""metrics.jsonl read as it grows, per key by step and by time, each row with its
producer; a torn tail waits, a replaced file starts over. plan.json read as it changes."""

from __future__ import annotations

import json
import math

from tests.support.prime_rl_monitor import FileMonitor, monitor_dir
from tracewatch.core.recordings.prime_rl.metrics import MetricsReader, legacy_producer
from tracewatch.core.recordings.prime_rl.plan import EvalPlan


def test_rows_of_every_producer_are_series_by_step_and_by_time(tmp_path):
    orchestrator, trainer = FileMonitor(tmp_path, "orchestrator"), FileMonitor(tmp_path, "trainer")
    orchestrator.log_metrics({"train/reward/mean": 0.5, "time/step": 4.0, "bad": math.nan}, 1)
    trainer.log_metrics({"optim/grad_norm": 0.4}, 1)
    orchestrator.log_metrics({"inference/agg/num_requests_running/mean": 31.0}, None)
    orchestrator.log_metrics({"train/reward/mean": 0.75}, 2)
    metrics = MetricsReader(monitor_dir(tmp_path) / "metrics.jsonl")
    assert metrics.read_on() == 4
    reward = metrics.series("train/reward/mean")
    assert reward.step.tolist() == [1.0, 2.0] and reward.value.tolist() == [0.5, 0.75]
    assert [metrics.producers[p] for p in metrics.series("optim/grad_norm").producer] == ["trainer"]
    running = metrics.series("inference/agg/num_requests_running/mean")
    assert len(running.by_time().value) == 1 and len(running.by_step().value) == 0 and running.time[0] > 0
    assert metrics.series("bad") is None and set(metrics.keys) == {"train/reward/mean", "time/step", "optim/grad_norm", "inference/agg/num_requests_running/mean"}


def test_a_torn_tail_waits_garbage_is_skipped_and_a_replaced_file_starts_over(tmp_path):
    path = tmp_path / "metrics.jsonl"
    row = json.dumps({"step": 1, "time": 2.0, "loss/mean": 1.5, "flag": True, "name": "x"})
    path.write_text("not json\n[1]\n" + '{"step": 3, "a": NaN, "b": 1e999}\n' + row[:20])
    metrics = MetricsReader(path)
    assert metrics.read_on() == 1 and metrics.skipped.count == 2
    assert metrics.series("a").value[0] != metrics.series("a").value[0] and metrics.series("b").value[0] == math.inf
    with open(path, "a") as file:
        file.write(row[20:] + "\n")
    assert metrics.read_on() == 1 and metrics.series("loss/mean").value.tolist() == [1.5] and metrics.series("flag") is None
    path.write_text(json.dumps({"step": 9, "loss/mean": 0.1}) + "\n")
    metrics.read_on()
    assert metrics.generation == 1 and metrics.series("loss/mean").step.tolist() == [9.0] and metrics.series("a") is None


def test_legacy_rows_get_the_producer_prime_rl_s_dashboard_gives_them():
    assert legacy_producer("optim/lr", 3) == "trainer"
    assert legacy_producer("train/x", 3) == "orchestrator" and legacy_producer("eval/x/avg@4", 3) == "orchestrator"
    assert legacy_producer("inference/agg/x", None) == "infer" and legacy_producer("whatever", 1) == "trainer"


def test_the_eval_plan_is_read_when_it_changes_and_bad_entries_are_left_out(tmp_path):
    monitor = FileMonitor(tmp_path)
    plan = EvalPlan(monitor_dir(tmp_path) / "plan.json")
    assert plan.refresh() is False and plan.expected == {}
    monitor.log_eval_plan("gsm8k", 0, 128)
    monitor.log_eval_plan("gsm8k", 50, 128)
    assert plan.refresh() is True and plan.expected == {"gsm8k": {0: 128, 50: 128}}
    assert plan.refresh() is False
    (monitor_dir(tmp_path) / "plan.json").write_text('{"gsm8k": {"x": 1, "7": "8", "9": 3}, "math": 4}')
    assert plan.refresh() is True and plan.expected == {"gsm8k": {9: 3}}
    (monitor_dir(tmp_path) / "plan.json").write_text("[")
    assert plan.refresh() is False and "not JSON" in plan.problem and plan.expected == {"gsm8k": {9: 3}}
