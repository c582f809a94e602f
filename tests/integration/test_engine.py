"""Variants end to end: real demo servers under the real supervisor, real signals."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import threading
import time
from datetime import datetime

from tests.support.demo_sessions import WAIT, attached_variant, demo_variant, server_pids
from tests.support.polling import alive, eventually
from tests.support.scripted_server import ScriptedServer, attached
from tracewatch.core import ports
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session import variant as variant_module
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.status import Status
from tracewatch.core.session.variant import QUEUE_CHUNK, START_CHUNK
from tracewatch.core.supervision import capture


async def test_two_variants_run_to_done(engine_for):
    engine = engine_for(
        demo_variant("baseline", ["normal", "transient", "multi-agent"]),
        demo_variant("candidate", ["normal", "retried"]),
    )
    await engine.start()
    await asyncio.wait_for(engine.wait(), 90)
    for name, count in (("baseline", 3), ("candidate", 2)):
        variant = engine.variants[name]
        assert variant.state is VariantState.DONE, (variant.state, variant.reason)
        rollouts = list(engine.store.variant_rollouts(name))
        assert len(rollouts) == count
        assert all(r.status is Status.DONE and r.reward is not None for r in rollouts)
        assert all(r.turns > 0 and r.record is not None for r in rollouts)
        assert variant.pid is None and not any(alive(pid) for pid in server_pids(engine, name))
    multi = next(r for r in engine.store.variant_rollouts("baseline") if r.task_data["scenario"] == "multi-agent")
    assert len(multi.traces) == 2
    stats = engine.store.stats("baseline")
    assert stats.counts[Status.DONE] == 3 and "agent" in stats.phases


async def test_cancel_variant_mid_run_leaves_no_process(engine_for):
    engine = engine_for(demo_variant("stuck", ["stuck", "stuck", "normal"], max_concurrent=2))
    await engine.start()
    variant = engine.variants["stuck"]
    store = engine.store
    await eventually(
        lambda: sum(r.status is Status.RUNNING and r.turns > 0 for r in store.rollouts.values()) == 2,
        timeout=WAIT,
        what="both stuck rollouts to be running a turn",
    )
    pids = server_pids(engine, "stuck")
    variant.cancel()
    assert variant.state is VariantState.CANCELLING
    await asyncio.wait_for(engine.wait(), 30)
    assert variant.state is VariantState.CANCELLED
    assert [e.kind for e in variant.escalation][:2] == ["cancel-runs", "sigterm"]
    assert all(r.status is Status.CANCELLED for r in store.rollouts.values())
    assert not any(alive(pid) for pid in pids)
    assert variant.outcome_text and "server stopped with SIGTERM" in variant.outcome_text


async def test_server_killed_mid_run_fails_its_rollouts(engine_for):
    engine = engine_for(demo_variant("doomed", ["stuck", "stuck"]))
    await engine.start()
    variant = engine.variants["doomed"]
    store = engine.store
    await eventually(lambda: sum(r.turns > 0 for r in store.rollouts.values()) == 2, timeout=WAIT, what="rollouts mid-turn")
    supervisor_pid, server_pid = server_pids(engine, "doomed")
    os.kill(server_pid, signal.SIGKILL)
    await asyncio.wait_for(engine.wait(), WAIT)
    assert variant.state is VariantState.FAILED
    assert "exited with code 137" in variant.reason
    assert all(r.status is Status.FAILED and "exited with code 137" in r.reason for r in store.rollouts.values())
    assert not alive(supervisor_pid)


def listening() -> socket.socket:
    """A socket that holds a port, as another process would between our look and the bind."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder


async def test_a_port_taken_before_the_server_binds_it_is_replaced_by_another(engine_for, monkeypatch):
    with listening() as thief:
        taken = thief.getsockname()[1]
        picks = iter([taken])
        monkeypatch.setattr(variant_module, "free_port", lambda: next(picks, None) or ports.free_port())
        engine = engine_for(demo_variant("lucky", ["normal", "normal"]))
        await engine.start()
        await asyncio.wait_for(engine.wait(), 90)
    variant = engine.variants["lucky"]
    assert variant.state is VariantState.DONE, variant.reason
    assert variant.address is not None and not variant.address.endswith(f":{taken}")
    assert all(r.status is Status.DONE for r in engine.store.rollouts.values())
    assert variant.outcome_text == "server stopped with SIGTERM · exit code 0"


async def test_ports_taken_every_time_fail_the_variant_clearly(engine_for, monkeypatch):
    thieves = [listening(), listening()]
    try:
        taken = [thief.getsockname()[1] for thief in thieves]
        picks = iter(taken)
        monkeypatch.setattr(variant_module, "free_port", lambda: next(picks))
        monkeypatch.setattr(variant_module, "PORT_ATTEMPTS", 2)
        engine = engine_for(demo_variant("unlucky", ["normal"]))
        await engine.start()
        await asyncio.wait_for(engine.wait(), 90)
    finally:
        for thief in thieves:
            thief.close()
    variant = engine.variants["unlucky"]
    assert variant.state is VariantState.FAILED
    expected = f"the server could not listen: 2 free ports in a row ({taken[0]}, {taken[1]}) were taken by another process before it bound them"
    assert variant.reason == expected
    assert engine.store.rollouts["unlucky/0"].status is Status.FAILED and engine.store.rollouts["unlucky/0"].reason == expected
    assert not any(alive(pid) for pid in server_pids(engine, "unlucky"))


async def test_attach_to_nothing_fails_after_health_timeout(engine_for):
    port = ports.free_port()
    engine = engine_for(attached_variant("remote", f"tcp://127.0.0.1:{port}", health_timeout=1.0))
    started = time.monotonic()
    await engine.start()
    await asyncio.wait_for(engine.wait(), WAIT)
    variant = engine.variants["remote"]
    assert variant.state is VariantState.FAILED
    assert variant.reason == f"nothing listens at 127.0.0.1:{port} (connection refused) for the whole health timeout (1s)"
    assert time.monotonic() - started >= 1.0
    assert engine.store.rollouts["remote/0"].status is Status.FAILED


async def test_attach_to_something_that_is_not_an_env_server_fails_at_once(engine_for):
    """An HTTP-like server is named as such, without waiting out
    the (here ten-minute) health timeout."""

    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(10)
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(http, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    engine = engine_for(attached_variant("remote", f"tcp://127.0.0.1:{port}", health_timeout=600.0))
    async with server:
        await engine.start()
        await asyncio.wait_for(engine.wait(), WAIT)
    variant = engine.variants["remote"]
    assert variant.state is VariantState.FAILED
    assert variant.reason == f"something at 127.0.0.1:{port} is not a ZMQ env server (an HTTP server answered 'HTTP/1.1 400 Bad Request')"
    assert variant.log_tail()[0].startswith(f"(attached to tcp://127.0.0.1:{port}: its output stays where it runs")


async def test_cancel_one_rollout_over_the_wire(engine_for):
    engine = engine_for(demo_variant("one", ["stuck", "normal"]))
    await engine.start()
    store = engine.store
    await eventually(lambda: store.rollouts["one/0"].turns > 0, timeout=WAIT, what="the stuck rollout's first turn")
    assert engine.cancel_rollout("one/0")
    assert store.rollouts["one/0"].status is Status.CANCELLING
    await asyncio.wait_for(engine.wait(), 30)
    assert store.rollouts["one/0"].status is Status.CANCELLED
    assert "aborted" in store.rollouts["one/0"].reason
    assert store.rollouts["one/1"].status is Status.DONE
    assert engine.variants["one"].state is VariantState.DONE


async def test_start_after_done_starts_a_fresh_child(engine_for):
    engine = engine_for(demo_variant("again", ["normal"]))
    await engine.start()
    await asyncio.wait_for(engine.wait(), 30)
    variant = engine.variants["again"]
    first = variant.child
    assert variant.state is VariantState.DONE and variant.can_start
    variant.start()
    assert variant.state is VariantState.STARTING
    await asyncio.wait_for(engine.wait(), 30)
    assert variant.state is VariantState.DONE and variant.child is not first
    assert [r.status for r in engine.store.variant_rollouts("again")] == [Status.DONE, Status.DONE]
    assert [r.run for r in engine.store.variant_rollouts("again")] == [1, 2], "each start is its own run"
    assert engine.store.stats("again", run=2).counts[Status.DONE] == 1


async def test_second_cancel_kills_a_server_that_ignores_sigterm(engine_for):
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    engine = engine_for(
        "[[variants]]\n"
        'name = "stubborn"\n'
        f"command = {json.dumps([sys.executable, '-c', stubborn, '{address}'])}\n"
        'tasks = [{ id = "t" }]\n'
        'model = "m"\n'
        "health_timeout = 60.0\n"
        "grace_seconds = 30.0\n"
    )
    await engine.start()
    variant = engine.variants["stubborn"]
    await eventually(lambda: variant.pid is not None and variant.health_left is not None, timeout=WAIT, what="the server to be waited on")
    pids = server_pids(engine, "stubborn")
    variant.cancel()
    await eventually(lambda: any(e.kind == "sigterm" for e in variant.escalation), timeout=WAIT, what="SIGTERM")
    assert variant.grace_left() > 20
    variant.cancel()
    await asyncio.wait_for(engine.wait(), WAIT)
    assert variant.state is VariantState.CANCELLED
    # who sent SIGKILL, not how long it took: a loaded machine may take its time either way
    kills = [e.detail for e in variant.escalation if e.kind == "sigkill"]
    assert kills and all(kill.endswith(": a second cancel") for kill in kills), kills
    assert "killed" in variant.outcome_text
    # SIGKILL from outside: the server dies when the kernel next schedules it, not when kill() returns
    await eventually(lambda: not any(alive(pid) for pid in pids), what="the killed server to be gone")
    assert engine.store.rollouts["stubborn/0"].status is Status.CANCELLED


async def test_a_normal_finish_says_the_server_was_stopped_and_shows_the_server_pid(engine_for):
    engine = engine_for(demo_variant("plain", ["normal"]))
    await engine.start()
    variant = engine.variants["plain"]
    await eventually(lambda: variant.pid is not None, timeout=WAIT, what="the server to run")
    supervisor_pid, server_pid = server_pids(engine, "plain")
    assert variant.pid == server_pid != supervisor_pid
    await asyncio.wait_for(engine.wait(), 30)
    assert variant.state is VariantState.DONE
    assert variant.outcome_text == "server stopped with SIGTERM · exit code 0"


STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
"""A server that never answers health and ignores SIGTERM: only SIGKILL ends it."""


async def test_health_timeout_kills_the_server_after_its_whole_grace_and_says_so(engine_for):
    engine = engine_for(
        "[[variants]]\n"
        'name = "mute"\n'
        f"command = {json.dumps([sys.executable, '-c', STUBBORN, '{address}'])}\n"
        'tasks = [{ id = "t" }]\n'
        'model = "m"\n'
        "health_timeout = 1.0\n"
        "grace_seconds = 2.0\n"
    )
    await engine.start()
    variant = engine.variants["mute"]
    await eventually(lambda: variant.pid is not None, timeout=WAIT, what="the server to run")
    pids = server_pids(engine, "mute")
    await eventually(lambda: any(e.kind == "sigterm" for e in variant.escalation), timeout=WAIT, what="SIGTERM")
    grace_until = variant._grace_until
    await asyncio.wait_for(engine.wait(), WAIT)
    assert variant.state is VariantState.FAILED
    assert "did not answer health within 1s" in variant.reason
    assert "server killed with SIGKILL: still running 2s after SIGTERM · exit code 137" in variant.reason
    record = json.loads(variant.child.record_path.read_text())
    term, kill = (datetime.fromisoformat(sent["at"]).timestamp() for sent in record["signals"])
    assert kill - term >= 2.0, "the server gets the whole configured grace"
    assert grace_until == record["sigkill_due_at"] <= kill, "the countdown ends as SIGKILL is sent"
    assert [e.kind for e in variant.escalation] == ["sigterm", "sigkill", "exited"]
    assert "grace ran out" in variant.escalation[1].detail
    assert not any(alive(pid) for pid in pids)


async def test_hashing_captures_and_syncing_the_recording_stay_off_the_event_loop(engine_for, tmp_path, monkeypatch):
    """A server stop hashes both capture files and shutdown syncs the recording: both
    read or wait on the disk, so neither may run on the loop the screen is drawn from."""
    loop_thread = threading.current_thread()
    ran_on: dict[str, list[threading.Thread]] = {"hash": [], "close": []}

    def watched(name, real):
        def call(*args, **kwargs):
            ran_on[name].append(threading.current_thread())
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(capture, "file_digest", watched("hash", capture.file_digest))
    monkeypatch.setattr(Recorder, "close", watched("close", Recorder.close))
    engine = engine_for(demo_variant("synced", ["normal"]))
    engine.recorder = Recorder(tmp_path / "session.twrec")
    engine.variants["synced"].recorder = engine.recorder
    await engine.start()
    await asyncio.wait_for(engine.wait(), 30)
    await engine.shutdown()
    assert len(ran_on["hash"]) == 2 and len(ran_on["close"]) == 1
    assert loop_thread not in ran_on["hash"] + ran_on["close"]


async def test_a_long_task_list_shows_at_once_and_costs_no_task_per_queued_rollout(engine_for, tmp_path):
    """5,000 tasks: the first thousand are in the store when start returns (the table
    can show them), the rest follow a thousand per turn of the loop; only
    max_concurrent runs wait on the server (no coroutine per queued rollout, which made
    quitting 100,000 quadratic); cancelling ends every one, cancelled."""
    lines = [json.dumps({"id": f"t{i}", "name": "stuck", "prompt": "p", "scenario": "stuck", "kind": "coding"}) for i in range(5000)]
    (tmp_path / "long.jsonl").write_text("\n".join(lines) + "\n")
    inline = demo_variant("long", ["stuck"], max_concurrent=2).splitlines()
    engine = engine_for("\n".join(
        f"tasks = {json.dumps(str(tmp_path / 'long.jsonl'))}" if line.startswith("tasks = ") else line for line in inline
    ))
    store = engine.store
    before = len(asyncio.all_tasks())
    await engine.start()
    assert len(store.rollouts) == QUEUE_CHUNK
    variant = engine.variants["long"]
    await eventually(lambda: sum(r.status is Status.RUNNING for r in store.rollouts.values()) == 2, timeout=WAIT, what="two runs")
    assert len(store.rollouts) == 5000
    assert len(asyncio.all_tasks()) - before < 20
    variant.cancel()
    await asyncio.wait_for(engine.wait(), WAIT)
    assert variant.state is VariantState.CANCELLED
    assert all(r.status is Status.CANCELLED for r in store.rollouts.values())


async def test_thousands_of_runs_start_a_chunk_per_turn_of_the_loop(tmp_path):
    """max_concurrent in the thousands: the runs start START_CHUNK per turn of the loop,
    so the screen's tick and keys get turns while they start, and in task order."""
    count = 3 * START_CHUNK + 5
    tasks = [f"t{i}" for i in range(count)]
    async with ScriptedServer({}) as server:  # no script: every run waits
        engine = LiveSession(attached(server.address, tasks, tmp_path, max_concurrent=count), session_dir=tmp_path / "s")
        store, loop = engine.store, asyncio.get_running_loop()
        running: list[int] = []

        def each_turn() -> None:
            running.append(sum(r.status is Status.RUNNING for r in store.rollouts.values()))
            if running[-1] < count:
                loop.call_soon(each_turn)

        await engine.start()
        each_turn()
        await eventually(lambda: running[-1] == count, timeout=WAIT, what="every run started")
        await eventually(lambda: len(server.runs) == count, timeout=WAIT, what="every run request at the server")
        assert server.runs == tasks
        steps = [after - before for before, after in zip(running, running[1:])]
        assert max(steps) <= START_CHUNK, steps
        await engine.shutdown()
    assert all(r.status is Status.CANCELLED for r in store.rollouts.values())
