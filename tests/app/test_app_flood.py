"""The real app attached to a source far faster than it: a ROUTER on 127.0.0.1 (in
its own process) sends deltas for as long as the test runs. The app must keep its loop
for the screen and the keys: a key press is answered and the screen repaints while
the flood goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.flooding_server import FloodingServer
from tests.support.polling import eventually, until, while_moving
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.session import variant
from tracewatch.core.session.config import load_config
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.app import TracewatchApp


def write_config(tmp_path: Path, address: str) -> Path:
    config = tmp_path / "tracewatch.toml"
    config.write_text(
        "[[variants]]\n"
        'name = "flood"\n'
        f'attach = "{address}"\n'
        'tasks = [{ id = "a", prompt = "p" }, { id = "b", prompt = "p" }]\n'
        'model = "m"\n'
        "max_concurrent = 2\n"
    )
    return config


@pytest.fixture
def flood() -> Iterator[FloodingServer]:
    server = FloodingServer()
    yield server
    server.close()


async def runs_end_as_the_backlog_drains(store: RolloutStore, sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
    """Until both runs end. What the source queued before it stopped (its queue, the
    client's and both kernel buffers: tens of thousands of deltas) takes a loaded
    machine longer than MARGIN to read, so the deadline is for progress: each MARGIN
    must bring a delta, or the end."""

    await while_moving(
        lambda: all(r.status.finished for r in store.rollouts.values()),
        lambda: sum(r.deltas for r in store.rollouts.values()),
        "the next delta of the backlog, or both runs to end",
        sleep,
    )


async def test_keys_and_repaints_go_on_while_a_fast_source_floods(tmp_path: Path, flood: FloodingServer) -> None:
    engine = LiveSession(load_config(write_config(tmp_path, flood.address)), session_dir=tmp_path / "session")
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        store = engine.store
        await until(pilot, lambda: sum(r.deltas for r in store.rollouts.values()) > 2000, "the flood to arrive")
        await until(pilot, lambda: app.selected == "flood/0", "the first row to be selected")
        repaints = 0
        display = app._display

        def counting(screen, renderable) -> None:
            nonlocal repaints
            repaints += renderable is not None
            display(screen, renderable)

        app._display = counting
        app.table.focus()
        held_back = flood.held_back
        await pilot.press("down")
        await until(pilot, lambda: app.selected == "flood/1", "the key press to move the selection")
        await until(pilot, lambda: repaints >= 5, "the screen to repaint")
        # the source stayed ahead of the client through the key press: a send found the
        # client's queue full since just before it (polled: on a loaded box the source
        # process may wait for a core as long as the client does)
        await until(pilot, lambda: flood.held_back > held_back, "the source to find the client's queue full")
        assert flood.flooding  # all of it while the source was still flooding
        flood.stop_flooding()
        await runs_end_as_the_backlog_drains(store, pilot.pause)
        assert {r.status for r in store.rollouts.values()} == {Status.DONE}, [r.reason for r in store.rollouts.values()]
        await engine.shutdown()


async def test_a_server_busy_streaming_is_alive_though_its_health_replies_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A health reply queues behind the deltas ahead of it: frames arriving while a
    check waits count as an answer, so a flood never fails the runs it feeds."""
    monkeypatch.setattr(variant, "HEALTH_INTERVAL", 0.05)
    monkeypatch.setattr(variant, "HEALTH_TIMEOUT", 0.2)
    server = FloodingServer(answer_health_after=1)  # then never again
    try:
        engine = LiveSession(load_config(write_config(tmp_path, server.address)), session_dir=tmp_path / "session")
        await engine.start()
        store = engine.store
        await eventually(lambda: server.health_checks > 2 * variant.HEALTH_MISSES, what="unanswered health checks")
        assert not any(r.status.finished for r in store.rollouts.values()), [r.reason for r in store.rollouts.values()]
        server.stop_flooding()
        await runs_end_as_the_backlog_drains(store)
        assert {r.status for r in store.rollouts.values()} == {Status.DONE}, [r.reason for r in store.rollouts.values()]
        await engine.shutdown()
    finally:
        server.close()
