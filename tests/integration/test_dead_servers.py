"""A server that dies with rollouts still queued fails every rollout it owns, queued
ones included, and the run ends: an exited child at once, a stopped child or an
attached server after its missed health checks. Nothing more is sent to it."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from tests.support.demo_sessions import WAIT, demo_variant, server_pids
from tests.support.polling import alive, eventually
from tests.support.scripted_server import ScriptedServer, attached, header
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.session import variant as variant_module
from tracewatch.core.session.status import Status
from tracewatch.core.session.variant import VariantState


@pytest.fixture
def quick_health(monkeypatch):
    """Health checks every 0.2 s, each given 0.5 s: a dead server is found in seconds."""
    monkeypatch.setattr(variant_module, "HEALTH_INTERVAL", 0.2)
    monkeypatch.setattr(variant_module, "HEALTH_TIMEOUT", 0.5)


def everything_failed(engine: LiveSession, name: str, words: str) -> bool:
    rollouts = list(engine.store.variant_rollouts(name))
    return all(r.status is Status.FAILED and words in (r.reason or "") for r in rollouts)


async def test_an_attached_server_that_stops_answering_fails_its_queued_rollouts(tmp_path, quick_health):
    scripts = {task: [("delta", {"trace": "t", "open": header("t")})] for task in ("a", "b", "c")}
    async with ScriptedServer(scripts) as server:
        engine = LiveSession(attached(server.address, ["a", "b", "c"], tmp_path, max_concurrent=1), session_dir=tmp_path / "s")
        await engine.start()
        await eventually(lambda: engine.store.rollouts["remote/0"].deltas == 1, timeout=WAIT, what="the first run to stream")
        server.healthy = False  # as good as dead: nothing answers
        await asyncio.wait_for(engine.wait(), WAIT)
        assert server.runs == ["a"], "nothing was dispatched to the dead server"
    assert everything_failed(engine, "remote", "stopped answering: 3 health checks in a row"), [
        (r.status, r.reason) for r in engine.store.rollouts.values()
    ]
    assert engine.variants["remote"].state is VariantState.FAILED


async def test_a_killed_child_fails_its_queued_rollouts_at_once(engine_for):  # noqa: F811
    engine = engine_for(demo_variant("doomed", ["stuck", "stuck", "normal"], max_concurrent=1))
    await engine.start()
    store = engine.store
    await eventually(lambda: store.rollouts["doomed/0"].turns > 0, timeout=WAIT, what="the first rollout mid-turn")
    supervisor_pid, server_pid = server_pids(engine, "doomed")
    os.kill(server_pid, signal.SIGKILL)
    await asyncio.wait_for(engine.wait(), WAIT)
    assert everything_failed(engine, "doomed", "exited with code 137"), [(r.status, r.reason) for r in store.rollouts.values()]
    assert [r.request_id is not None for r in store.rollouts.values()] == [True, False, False]
    assert not alive(supervisor_pid)


async def test_a_stopped_child_is_found_dead_by_health_and_its_rollouts_fail(engine_for, quick_health):  # noqa: F811
    engine = engine_for(demo_variant("frozen", ["stuck", "stuck", "normal"], max_concurrent=1, grace_seconds=1.0))
    await engine.start()
    store = engine.store
    await eventually(lambda: store.rollouts["frozen/0"].turns > 0, timeout=WAIT, what="the first rollout mid-turn")
    supervisor_pid, server_pid = server_pids(engine, "frozen")
    os.kill(server_pid, signal.SIGSTOP)
    try:
        await asyncio.wait_for(engine.wait(), WAIT)
    finally:
        if alive(server_pid):
            os.kill(server_pid, signal.SIGCONT)
    assert everything_failed(engine, "frozen", "stopped answering"), [(r.status, r.reason) for r in store.rollouts.values()]
    assert engine.variants["frozen"].state is VariantState.FAILED
    await eventually(lambda: not alive(server_pid) and not alive(supervisor_pid), timeout=WAIT, what="the stopped server to be killed")
