"""The relay a driver opts into: verifiers' own EnvClient, wrapped, drives the demo
server; viewers (`tracewatch tap`) connected early and late see the same runs."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from typing import Any

import pytest
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient as VerifiersClient
from verifiers.v1.types import SamplingConfig

from tests.support.demo_launch import launch, stop
from tests.support.polling import eventually, until
from tests.support.tap_checks import assert_read_in_order_or_counted
from tests.support.tether import TetheredProcess, run_tethered
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.engine.replay import ReplaySession
from tracewatch.core.ports import free_address
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.config import Config
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.status import Status
from tracewatch.core.taps.relay_viewer import RelayViewer
from tracewatch.tui.app import TracewatchApp
from tracewatch_relay import Relay, RelayedClient

WAIT = 60.0
SAMPLING = SamplingConfig(temperature=0.5)


def task(i: int, scenario: str) -> dict:
    return {"id": f"r{i}", "name": f"{scenario} {i}", "prompt": "p", "scenario": scenario, "kind": "math"}


@pytest.fixture(scope="module")
def upstream():
    proc, address = launch(speed=60.0, seed=5, stderr=subprocess.DEVNULL)
    yield address
    stop(proc)


@pytest.fixture
async def viewers(tmp_path):
    engines: list[LiveSession] = []

    async def view(address: str, name: str, recorder: Recorder | None = None) -> LiveSession:
        engine = LiveSession(Config.for_relay(address, name), recorder=recorder, session_dir=tmp_path / name)
        engines.append(engine)
        await engine.start()
        return engine

    yield view
    for engine in engines:
        await engine.shutdown()


async def test_early_and_late_viewers_see_every_run_the_driver_relays(upstream, viewers) -> None:
    relay = Relay("tcp://127.0.0.1:0")
    client = RelayedClient(VerifiersClient(upstream), relay)
    try:
        early = await viewers(relay.address, "early")
        await eventually(lambda: early.variants["early"].state is VariantState.RUNNING, WAIT, "the early viewer welcomed")
        await client.wait_for_server_startup(timeout=WAIT)
        own: list[dict] = []
        stuck = asyncio.ensure_future(client.run(EvalClientConfig(), "demo-model", SAMPLING, task(0, "stuck"), on_delta=own.append))
        await eventually(lambda: len(own) >= 2, WAIT, "the stuck run streaming")
        late = await viewers(relay.address, "late")
        late_key = await eventually(lambda: next(iter(late.store.variants["late"]), None), WAIT, "the run in flight sent to the late viewer")
        await eventually(lambda: late.store.rollouts[late_key].deltas == len(own), WAIT, "every delta so far, then live")
        assert late.store.rollouts[late_key].status is Status.RUNNING
        episodes = await asyncio.wait_for(
            asyncio.gather(*(client.run(EvalClientConfig(), "demo-model", SAMPLING, task(i, "normal")) for i in (1, 2))), WAIT
        )
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        for engine, name in ((early, "early"), (late, "late")):
            rollouts = await eventually(
                lambda engine=engine, name=name: (r := list(engine.store.variant_rollouts(name))) and all(x.status.finished for x in r) and r,
                WAIT,
                f"{name}: every relayed run ended",
            )
            by_task = {r.task_data["id"]: r for r in rollouts}
            assert by_task["r0"].status is Status.CANCELLED
            for episode, i in zip(episodes, (1, 2)):
                rollout = by_task[f"r{i}"]
                assert rollout.status is Status.DONE and rollout.note == "model demo-model · temperature 0.5"
                assert [len(t["nodes"]) for t in rollout.record["traces"]] == [len(t.nodes) for t in episode.traces]
        assert relay.dropped == 0
    finally:
        await client.close()
        relay.close()


async def test_a_full_queue_drops_and_counts_and_never_blocks_the_caller() -> None:
    relay = Relay("tcp://127.0.0.1:0", max_bytes=0)
    try:
        on_delta = relay.begin({"id": "t"})
        for i in range(100):
            on_delta({"trace": "t", "set": {"i": i}})
        on_delta.end(error="stopped")
        assert relay.dropped == 102
    finally:
        relay.close()


def test_a_relay_address_nobody_serves_is_a_clear_error() -> None:
    address = free_address()
    result = run_tethered(
        [sys.executable, "-m", "tracewatch.cli", "tap", address, "--headless", "--no-record"], capture_output=True, text=True, timeout=WAIT
    )
    assert result.returncode == 2
    assert f"nothing serves a relay at {address}" in result.stderr


async def test_a_listener_that_is_not_a_relay_fails_the_viewer_with_the_reason(viewers) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        engine = await viewers(f"tcp://127.0.0.1:{listener.getsockname()[1]}", "v")
        variant = engine.variants["v"]
        assert isinstance(variant, RelayViewer)
        await asyncio.wait_for(variant.wait(), WAIT)
    assert variant.state is VariantState.FAILED and "no relay answered" in (variant.reason or "")


BACKLOG = 50_000
"""Deltas of one run in flight: more than a viewer reads in a stop's half second, fewer
than the relay keeps for a late viewer (a quarter of `MAX_BYTES`)."""


async def test_a_viewer_behind_a_backlog_of_large_deltas_quits_on_q_and_counts_what_it_left(viewers, tmp_path) -> None:
    """`tracewatch tap` reads a backlog of large deltas (all of a run in flight, sent
    when it connects) a slice of time at a time, so `q` is answered in the middle of it;
    the quit reads what is queued for a bounded while and counts the rest: no delta is
    both recorded and counted, and those recorded came in order."""
    relay = Relay("tcp://127.0.0.1:0")
    try:
        on_delta = relay.begin({"id": "big", "prompt": "p"}, model="m")
        on_delta({"trace": "t", "open": {"id": "t"}})
        for i in range(BACKLOG):
            on_delta({"trace": "t", "set": {"i": i, "text": "x" * 200}})
        early = await viewers(relay.address, "early")
        await eventually(lambda: sum(r.deltas for r in early.store.rollouts.values()) == 1 + BACKLOG, WAIT, "the relay sent the whole run")
        engine = LiveSession(Config.for_relay(relay.address, "late"), session_dir=tmp_path / "late")
        viewer = engine.variants["late"]
        assert isinstance(viewer, RelayViewer)
        app = TracewatchApp(engine)
        async with app.run_test(size=(120, 40)) as pilot:
            rollout = await until(pilot, lambda: next(iter(engine.store.rollouts.values()), None), "the run in flight shown", WAIT)
            await until(pilot, lambda: rollout.deltas > 1, "the backlog being read", WAIT)
            await pilot.press("q")
            await asyncio.wait_for(viewer.wait(), WAIT)
    finally:
        relay.close()
    assert relay.dropped == 0 and viewer.dropped == 0
    assert viewer.state is VariantState.DONE and rollout.status.finished
    assert_read_in_order_or_counted(rollout, BACKLOG, viewer.unread, viewer.reason, lambda n: f"the viewer left {n:,} relay messages unread at the stop (the runs themselves go on)")


async def test_sigterm_stops_a_headless_tap_behind_a_backlog_with_its_summary() -> None:
    """`tracewatch tap --headless` answers SIGTERM while it reads a run in flight of
    many deltas: exit 143, the run ended, the summary printed (with what it left unread,
    if it left any)."""
    relay = Relay("tcp://127.0.0.1:0")
    tap = None
    try:
        on_delta = relay.begin({"id": "big", "prompt": "p"}, model="m")
        on_delta({"trace": "t", "open": {"id": "t"}})
        for i in range(BACKLOG):
            on_delta({"trace": "t", "set": {"i": i, "text": "x" * 200}})
        tap = TetheredProcess(
            [sys.executable, "-m", "tracewatch.cli", "tap", relay.address, "--name", "v", "--headless", "--no-record"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert tap.stdout is not None
        first = await asyncio.wait_for(asyncio.to_thread(tap.stdout.readline), WAIT)
        while not first.startswith("v/"):  # the run in flight shown: its deltas are being read
            first = await asyncio.wait_for(asyncio.to_thread(tap.stdout.readline), WAIT)
        tap.send_signal(signal.SIGTERM)
        out, err = await asyncio.to_thread(tap.communicate, timeout=WAIT)
    finally:
        relay.close()
        if tap is not None:
            tap.end()
    assert tap.returncode == 143, out + err
    assert "SIGTERM: stopping the viewer; the runs it watches go on" in out and "cancelling" not in out
    assert re.search(r"^v/0 \[.*\] unobserved .*the viewer stopped before the run ended", out, re.MULTILINE), out
    summary = re.search(r"^v: done; 1 unobserved; [^\n]*", out, re.MULTILINE)
    assert summary, out
    left = re.search(r"the viewer left ([\d,]+) relay messages unread at the stop \(the runs themselves go on\)$", summary[0])
    assert left is None or int(left[1].replace(",", "")) <= BACKLOG


async def second_run_in_flight(relay: Relay, viewers: Any) -> tuple[Any, Any]:
    """A viewer there from the start, then two runs of one task through the relay: the
    first ended, the second begun and still in flight: the early viewer and the second
    run's `on_delta`."""
    early = await viewers(relay.address, "early")
    await eventually(lambda: early.variants["early"].state is VariantState.RUNNING, WAIT, "the early viewer welcomed")
    task_data = {"id": "same", "prompt": "p"}
    first = relay.begin(task_data, model="m")
    first({"trace": "a", "open": {"id": "a"}})
    first.end(error="the driver ended it")
    second = relay.begin(task_data, model="m")
    second({"trace": "b", "open": {"id": "b"}})
    return early, second


async def test_a_late_viewer_shows_a_runs_start_and_number_as_an_early_one_does(viewers) -> None:
    """The second run of a task, joined late: the same `#` and the same start (so the
    same elapsed time) as in a viewer that was there from the start."""
    relay = Relay("tcp://127.0.0.1:0")
    try:
        early, second = await second_run_in_flight(relay, viewers)
        await eventually(lambda: len(early.store.variants["early"]) == 2, WAIT, "both runs seen from the start")
        late = await viewers(relay.address, "late")
        joined = await eventually(lambda: next(iter(late.store.variant_rollouts("late")), None), WAIT, "the run in flight sent late")
    finally:
        relay.close()
    there = early.store.rollouts[early.store.variants["early"][1]]
    assert joined.rollout_index == there.rollout_index == 1
    assert joined.started_at == there.started_at


async def test_a_late_viewers_recording_keeps_the_runs_start_its_elapsed_and_number(viewers, tmp_path) -> None:
    """A viewer that joins a second into a run is sent its deltas at once: it shows the
    run running from when its first delta went out, as a viewer there from the start
    does, and its recording, replayed or opened, shows the same `#` and elapsed."""
    relay = Relay("tcp://127.0.0.1:0")
    recording = tmp_path / "late.twrec"
    try:
        early, second = await second_run_in_flight(relay, viewers)
        there = await eventually(lambda: next((r for r in early.store.variant_rollouts("early") if r.rollout_index == 1 and r.trace_ids), None), WAIT, "the second run running")
        await eventually(lambda: early.store.clock() - (there.began_at or 0.0) > 1.0, WAIT, "a second of it")
        late = await viewers(relay.address, "late", Recorder(recording, meta={}))
        joined = await eventually(lambda: next((r for r in late.store.variant_rollouts("late") if r.trace_ids), None), WAIT, "the run in flight sent late")
        second.end(error="the driver ended it too")
        await eventually(lambda: joined.status.finished and there.status.finished, WAIT, "both viewers saw it end")
        await late.shutdown()
    finally:
        relay.close()
    assert joined.began_at == pytest.approx(there.began_at, abs=0.5), "running since its first delta went out, not since the join"
    assert joined.elapsed(0.0) == pytest.approx(there.elapsed(0.0), abs=0.5) and joined.elapsed(0.0) > 1.0
    replay = ReplaySession(recording, speed=0)
    await replay.start()
    await asyncio.wait_for(replay.wait(), WAIT)
    for session in (replay, OpenedRecording(recording)):
        (shown,) = session.store.rollouts.values()
        assert shown.rollout_index == joined.rollout_index == 1, type(session).__name__
        assert shown.began_at == pytest.approx(joined.began_at, abs=1e-6), type(session).__name__
        assert shown.elapsed(0.0) == pytest.approx(joined.elapsed(0.0), abs=0.01), type(session).__name__


async def welcomed(viewers: Any, address: str) -> tuple[LiveSession, RelayViewer]:
    """A viewer `v` of the relay at `address`, once the relay welcomed it."""
    engine = await viewers(address, "v")
    viewer = engine.variants["v"]
    assert isinstance(viewer, RelayViewer)
    await eventually(lambda: viewer.state is VariantState.RUNNING, WAIT, "the viewer welcomed")
    return engine, viewer


async def test_a_viewer_says_when_the_relay_went_away_and_picks_up_when_one_is_back(viewers) -> None:
    relay = Relay("tcp://127.0.0.1:0", heartbeat=0.2)
    address = relay.address
    back = None
    try:
        engine, viewer = await welcomed(viewers, address)
        relay.begin({"id": "a"})({"trace": "t", "open": {"id": "t"}})
        rollout = await eventually(lambda: next(iter(engine.store.variant_rollouts("v")), None), WAIT, "the run shown")
        relay.close()
        await eventually(lambda: viewer.source_lost, WAIT, "the viewer noticing the relay went away")
        assert viewer.status_line == viewer.source_lost and "went away" in viewer.source_lost
        back = Relay(address, heartbeat=0.2)
        await eventually(lambda: viewer.source_lost is None and viewer.state is VariantState.RUNNING, WAIT, "the viewer picking up again")
        back.begin({"id": "b"})({"trace": "u", "open": {"id": "u"}})
        await eventually(lambda: len(engine.store.variants["v"]) == 2, WAIT, "the new relay's run shown")
    finally:
        relay.close()
        if back is not None:
            back.close()
    assert rollout.status.finished and "the relay went away before the run ended" in (rollout.reason or "")


async def test_headless_tap_says_the_relay_went_away_and_so_does_its_summary() -> None:
    relay = Relay("tcp://127.0.0.1:0")
    tap = TetheredProcess(
        [sys.executable, "-m", "tracewatch.cli", "tap", relay.address, "--name", "v", "--headless", "--no-record"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert tap.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(tap.stdout.readline), WAIT)
        while not line.startswith("v: running"):
            assert line, "the tap ended before it was welcomed"
            line = await asyncio.wait_for(asyncio.to_thread(tap.stdout.readline), WAIT)
        relay.close()
        while "went away" not in line:
            assert line, "the tap ended without saying the relay went away"
            line = await asyncio.wait_for(asyncio.to_thread(tap.stdout.readline), WAIT)
        tap.send_signal(signal.SIGINT)
        out, err = await asyncio.to_thread(tap.communicate, timeout=WAIT)
    finally:
        relay.close()
        tap.end()
    assert line.startswith(f"v: the relay at {relay.address} went away")
    assert re.search(r"^v: done; .*the relay at \S+ went away", out, re.MULTILINE), out + err


@pytest.mark.parametrize("headless", [True, False], ids=["headless", "tui"])
def test_cancel_stalled_on_a_relay_viewer_is_refused_with_the_reason(headless: bool) -> None:
    relay = Relay("tcp://127.0.0.1:0")
    try:
        argv = [sys.executable, "-m", "tracewatch.cli", "tap", relay.address, "--name", "v", "--no-record", "--cancel-stalled", "5"]
        result = run_tethered(argv + (["--headless"] if headless else []), capture_output=True, text=True, timeout=WAIT, stdin=subprocess.DEVNULL)
    finally:
        relay.close()
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--cancel-stalled cannot cancel v's rollouts: a relay only publishes" in result.stderr


async def test_a_late_viewer_counts_the_run_in_flight_as_running_and_so_does_its_replay(viewers, tmp_path) -> None:
    """A viewer that joins mid-run is told when the run began before its first delta
    reaches it: once the delta is there the run counts as running, not queued, live
    and in the viewer's recording replayed."""
    relay = Relay("tcp://127.0.0.1:0")
    recording = tmp_path / "late.twrec"
    try:
        early = await viewers(relay.address, "early")
        await eventually(lambda: early.variants["early"].state is VariantState.RUNNING, WAIT, "the early viewer welcomed")
        run = relay.begin({"id": "t", "prompt": "p"}, model="m")
        run({"trace": "a", "open": {"id": "a"}})
        await eventually(lambda: any(r.trace_ids for r in early.store.variant_rollouts("early")), WAIT, "the run's first delta relayed")
        late = await viewers(relay.address, "late", Recorder(recording, meta={}))
        joined = await eventually(lambda: next((r for r in late.store.variant_rollouts("late") if r.trace_ids), None), WAIT, "the run in flight sent late")
        assert late.store.running_count() == 1
        run.end(error="the driver ended it")
        await eventually(lambda: joined.status.finished, WAIT, "the viewer saw it end")
        await late.shutdown()
    finally:
        relay.close()
    replay = ReplaySession(recording, speed=0)
    while not any(r.trace_ids for r in replay.store.rollouts.values()):
        assert replay.step(), "the recording ended before the run's first delta"
    assert replay.store.running_count() == 1


async def test_a_second_driver_sessions_runs_are_numbered_on_from_the_first_sessions(viewers) -> None:
    """A driver run twice with its relay at one address: the second session's runs of a
    task follow the first's (`#3` after `#1`, `#2`), as a proxy numbers them, and a task
    new in the second session starts at `#1`."""
    first = Relay("tcp://127.0.0.1:0", heartbeat=0.2)
    address = first.address
    second = None
    try:
        engine, viewer = await welcomed(viewers, address)
        for trace in ("a", "b"):
            run = first.begin({"id": "x"})
            run({"trace": trace, "open": {"id": trace}})
            run.end(error="the driver ended it")
        await eventually(lambda: len(engine.store.variants["v"]) == 2, WAIT, "the first session's two runs")
        first.close()
        await eventually(lambda: viewer.source_lost, WAIT, "the first session gone")
        second = Relay(address, heartbeat=0.2)
        for task_id in ("y", "x"):
            second.begin({"id": task_id})({"trace": task_id, "open": {"id": task_id}})
        await eventually(lambda: len(engine.store.variants["v"]) == 4, WAIT, "the second session's runs shown")
    finally:
        first.close()
        if second is not None:
            second.close()
    numbers = [(r.task_data["id"], r.rollout_index + 1) for r in engine.store.variant_rollouts("v")]
    assert numbers == [("x", 1), ("x", 2), ("y", 1), ("x", 3)]
    tasks = {r.task_data["id"]: r.task_index for r in engine.store.variant_rollouts("v")}
    assert tasks["x"] != tasks["y"]


DYING_DRIVER = """
import sys, time
from tracewatch_relay import Relay
relay = Relay(sys.argv[1], heartbeat=0.2)
for name in ("a", "b"):
    relay.begin({"id": name})({"trace": name, "open": {"id": name}})
print(relay.address, flush=True)
time.sleep(600)
"""


async def test_a_relay_whose_driver_died_ends_its_runs_in_flight_as_lost_with_the_reason(viewers) -> None:
    """`kill -9` of a driver mid-run: past its heartbeat its two runs end here, lost
    (unobserved, with why), not failed by a server, and never left running to stall."""
    address = free_address()
    driver = TetheredProcess([sys.executable, "-c", DYING_DRIVER, address], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None
        assert (await asyncio.wait_for(asyncio.to_thread(driver.stdout.readline), WAIT)).strip() == address
        engine = await viewers(address, "v")
        await eventually(lambda: sum(r.status is Status.RUNNING and bool(r.trace_ids) for r in engine.store.variant_rollouts("v")) == 2, WAIT, "both runs running")
        os.kill(driver.pid, signal.SIGKILL)
        rollouts = await eventually(
            lambda: (r := list(engine.store.variant_rollouts("v"))) and all(x.status.finished for x in r) and r, WAIT, "the runs ended once the driver was gone"
        )
    finally:
        driver.end()
    assert [r.status for r in rollouts] == [Status.UNOBSERVED, Status.UNOBSERVED]
    assert all(r.reason and r.reason.startswith("lost: the relay went away before the run ended") for r in rollouts), [r.reason for r in rollouts]
    assert not engine.store.stalled(engine.store.clock() + 3600)
    assert engine.variants["v"].source_lost
