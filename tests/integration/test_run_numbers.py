"""The numbers a session shows of a rollout are the run's own: played by the real demo
server under the real engine and recorder, each number is compared with what the
server replied (its episode) and with the same session's recording opened again."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from tests.support.demo_sessions import demo_variant, write_config
from tests.support.polling import eventually
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.recordings.trace_events import TraceEventsWritten, recording_rollouts, write_trace_events
from tracewatch.core.run.times import bar_segments
from tracewatch.core.run.trends import METRICS, set_apart
from tracewatch.core.session.config import load_config
from tracewatch.core.session.status import Status
from tracewatch.tui.run_views.trends_view import run_window

WAIT = 90.0


async def recorded_session(tmp_path: Path, scenarios: list[str]) -> tuple[LiveSession, Path]:
    """One demo variant playing `scenarios` to the end, recorded."""
    path = tmp_path / "session.twrec"
    config = load_config(write_config(tmp_path, [demo_variant("v", scenarios)]))
    engine = LiveSession(config, recorder=Recorder(path, meta={}), session_dir=tmp_path / "session")
    try:
        await engine.start()
        await asyncio.wait_for(engine.wait(), WAIT)
    finally:
        await engine.shutdown()
    return engine, path


async def test_a_provider_400_is_one_error_live_and_opened_as_in_the_servers_episode(tmp_path: Path) -> None:
    """The demo's `failing` run: the provider refuses a call and the trace ends with
    that error. The episode holds one error and one failed call that are the same
    error; the Errors column counts it once, live and in the recording opened later."""
    engine, path = await recorded_session(tmp_path, ["failing"])
    (rollout,) = engine.store.variant_rollouts("v")
    assert rollout.status is Status.FAILED and rollout.record is not None, rollout.reason
    (trace,) = rollout.record["traces"]
    failed = [call["error"] for call in trace["calls"] if call.get("node") is None]
    assert len(trace["errors"]) == len(failed) == 1, "the server's episode: one error and the call it came from"
    assert {k: failed[0][k] for k in ("type", "message")} == {k: trace["errors"][0][k] for k in ("type", "message")}
    assert rollout.errors == 1
    (opened,) = OpenedRecording(path).store.rollouts.values()
    assert (opened.errors, opened.error_text, opened.phase) == (1, rollout.error_text, rollout.phase)


def logged_seconds(engine: LiveSession, variant: str, request_id: str) -> float:
    """What the demo server logged for a run: "run ID: done in 9.4s"."""
    path = engine.variants[variant].stderr_path
    assert path is not None
    found = re.search(rf"run {re.escape(request_id)}: done in ([0-9.]+)s", path.read_text())
    assert found is not None, f"no 'done in' line for {request_id} in {path.read_text()[-2000:]}"
    return float(found.group(1))


async def test_a_retried_rollouts_elapsed_is_from_its_request_to_its_reply_as_the_server_logged(tmp_path: Path) -> None:
    """The demo's `retried` run: its first attempt dies, is discarded, and a fresh one
    runs to the end. Its elapsed is the server's own "done in" (request to reply), not
    the attempt that stood; the live clock never read more than the end result; the
    Timeline draws the first attempt as an attempt, not as waiting, and the
    `--trace-events` export has it as an attempt slice, waiting only before it; the
    recording opened later reads the same."""
    path = tmp_path / "session.twrec"
    variant = demo_variant("v", ["retried"]).replace('"--speed", "40"', '"--speed", "10"')
    engine = LiveSession(load_config(write_config(tmp_path, [variant])), recorder=Recorder(path, meta={}), session_dir=tmp_path / "session")
    try:
        await engine.start()
        await asyncio.wait_for(engine.wait(), WAIT)
    finally:
        await engine.shutdown()
    (rollout,) = engine.store.variant_rollouts("v")
    assert rollout.status is Status.DONE and rollout.request_id is not None, rollout.reason
    logged = logged_seconds(engine, "v", rollout.request_id)
    timing = rollout.record["traces"][0]["timing"] if rollout.record else {}
    stood = timing["scoring"]["end"] - timing["start"]  # the attempt that stood, alone
    assert logged - stood > 0.3, "the scenario: a first attempt worth seeing"
    assert abs(rollout.elapsed(0.0) - logged) <= 0.15, (rollout.elapsed(0.0), logged)
    assert rollout.running_since is not None and rollout.last_delta_at is not None
    assert rollout.elapsed(0.0) >= rollout.last_delta_at - rollout.running_since - 0.15, "the clock ran back at the end"
    times = rollout.times
    assert times is not None and len(times.attempts) == 1

    pieces = bar_segments(times, rollout.created_at, rollout.ended_at or 0.0)
    kinds = [name for _, _, name in pieces]
    assert "attempt" in kinds and kinds.index("attempt") < kinds.index("boot")
    assert all(end <= times.attempts[0][0] + 0.05 for start, end, name in pieces if name == "waiting"), pieces

    export = tmp_path / "trace.json"
    write_trace_events(recording_rollouts(path, TraceEventsWritten()), export)
    events = [e for e in json.loads(export.read_text())["traceEvents"] if e.get("ph") == "X"]
    (attempt,) = [e for e in events if e["cat"] == "attempt"]
    waits = [e for e in events if e["cat"] == "waiting"]
    assert all(w["ts"] + w["dur"] <= attempt["ts"] + 1 for w in waits), (waits, attempt)
    (whole,) = [e for e in events if e["cat"] == "rollout"]
    assert attempt["dur"] / 1e6 > 0.1 and whole["dur"] / 1e6 >= logged - 0.15

    (opened,) = OpenedRecording(path).store.rollouts.values()
    assert opened.elapsed(0.0) == pytest.approx(rollout.elapsed(0.0), abs=1e-6)


async def test_a_hung_model_call_is_model_time_live_and_an_open_slice_in_the_export(tmp_path: Path) -> None:
    """The demo's `stuck` run: its second model call never returns. While it hangs the
    Timeline draws the call as model time from when it was sent to now (not harness);
    cancelled, the `--trace-events` export holds it as an open model-call slice to the
    rollout's last known time, beside the call that returned."""
    path = tmp_path / "session.twrec"
    config = load_config(write_config(tmp_path, [demo_variant("v", ["stuck"])]))
    engine = LiveSession(config, recorder=Recorder(path, meta={}), session_dir=tmp_path / "session")
    try:
        await engine.start()
        (rollout,) = engine.store.variant_rollouts("v")
        await eventually(lambda: rollout.activity(engine.store.clock())[0] == "generating" and rollout.turns == 1, WAIT, "the call that hangs")
        (trace,) = rollout.traces.values()
        sent = trace.pending_since
        assert sent is not None
        await eventually(lambda: engine.store.clock() - sent > 1.0, WAIT, "a second of the hang")
        now = engine.store.clock()
        times = rollout.times
        assert times is not None
        pieces = bar_segments(times, rollout.created_at, now)
        hung = [(start, end) for start, end, name in pieces if name == "model" and end == now]
        assert hung and hung[0][0] == pytest.approx(sent, abs=0.05), pieces
        assert not [p for p in pieces if p[2] == "harness" and p[1] > sent + 0.05], "the hang drawn as harness"
        engine.variants["v"].cancel()
        await asyncio.wait_for(engine.wait(), WAIT)
    finally:
        await engine.shutdown()
    assert rollout.status is Status.CANCELLED
    export = tmp_path / "trace.json"
    write_trace_events(recording_rollouts(path, TraceEventsWritten()), export)
    events = [e for e in json.loads(export.read_text())["traceEvents"] if e.get("ph") == "X"]
    (whole,) = [e for e in events if e["cat"] == "rollout"]
    calls = [e for e in events if e["cat"] == "model"]
    assert [e["name"] for e in calls] == ["model call 1", "model call 2 (open)"], calls
    opened = calls[1]
    assert opened["args"] == {"open": True}
    assert opened["ts"] + opened["dur"] == pytest.approx(whole["ts"] + whole["dur"], abs=1.0), "open to the last known time"
    assert opened["dur"] / 1e6 > 1.0


async def test_throughput_counts_the_rollouts_that_ran_to_an_end_and_sets_apart_the_cancelled_and_never_sent(tmp_path: Path) -> None:
    """One slot: a normal run ends, a stuck one holds the slot, three wait. Cancelling
    the variant cancels the stuck one (it ran) and the three never sent. Trends'
    finished per minute counts the one that ran to an end, as the server's log has one
    run "done"; the cancelled one and the three never sent are counted apart."""
    config = load_config(write_config(tmp_path, [demo_variant("v", ["normal", "stuck", "normal", "normal", "normal"], max_concurrent=1)]))
    engine = LiveSession(config, session_dir=tmp_path / "session")
    try:
        await engine.start()
        store = engine.store
        await eventually(lambda: store.rollouts["v/1"].turns == 1 and store.rollouts["v/0"].status.finished, WAIT, "the stuck run holding the slot")
        engine.variants["v"].cancel()
        await asyncio.wait_for(engine.wait(), WAIT)
    finally:
        await engine.shutdown()
    path = engine.variants["v"].stderr_path
    assert path is not None
    logged_done = len(re.findall(r"run \S+: done in", path.read_text()))
    window = run_window(store)
    assert window is not None
    (whole,) = store.series.columns("v", *window, 1)
    finished = METRICS[0].values([whole])[0]
    assert finished is not None and round(finished * whole.seconds / 60.0, 6) == logged_done == 1
    assert set_apart([whole]) == (1, 3)
    assert [r.status for r in store.variant_rollouts("v")] == [Status.DONE, *[Status.CANCELLED] * 4]
