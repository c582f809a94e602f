"""A headless proxy's view yields the cores to its forwarding process: every thread of
the app but the one that starts forwarders runs at a lower priority, and the
forwarding process, the first and a replacement for one that was killed, keeps the
priority the app was started with (niceness is inherited, and cannot be taken back)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient as VerifiersClient
from verifiers.v1.types import SamplingConfig

from tests.support.demo_launch import launch, stop
from tests.support.polling import children, pid_gone, wait_until
from tests.support.tether import TetheredProcess
from tracewatch.core.ports import free_address
from tracewatch.core.taps.view_priority import VIEW_NICENESS

WAIT = 60.0
SAMPLING = SamplingConfig(temperature=0.3, max_tokens=512)


@pytest.fixture(scope="module")
def upstream():
    proc, address = launch(speed=50.0, seed=3, stderr=subprocess.DEVNULL)
    yield address
    stop(proc)


def niceness(pid: int) -> dict[int, int]:
    """Each live thread of `pid` -> its nice value."""
    found = {}
    for entry in os.listdir(f"/proc/{pid}/task"):
        try:
            found[int(entry)] = os.getpriority(os.PRIO_PROCESS, int(entry))
        except OSError:
            continue  # the thread ended meanwhile
    return found


def yielded(pid: int, base: int, lowered: int) -> bool:
    """Only the thread that starts forwarders keeps the app's priority; the main
    thread and every other are lowered."""
    threads = niceness(pid)
    return threads.get(pid) == lowered and sorted(threads.values()).count(base) == 1 and set(threads.values()) == {base, lowered}


async def runs_through(listen: str, first: int, count: int = 3) -> None:
    client = VerifiersClient(listen)
    try:
        await client.wait_for_server_startup(timeout=WAIT, interval=0.2)
        tasks = [{"id": f"n{first + i}", "prompt": "p", "scenario": "normal", "kind": "coding"} for i in range(count)]
        episodes = await asyncio.wait_for(asyncio.gather(*(client.run(EvalClientConfig(), "demo-model", SAMPLING, t) for t in tasks)), WAIT)
    finally:
        await client.close()
    assert all(episode.traces and episode.traces[0].nodes for episode in episodes)


async def test_a_headless_proxys_view_runs_below_its_forwarders_the_first_and_a_replacement(upstream) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    listen = free_address()
    app = TetheredProcess(
        [sys.executable, "-m", "tracewatch.cli", "proxy", "--listen", listen, "--upstream", upstream, "--headless", "--no-record"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        await runs_through(listen, 0)
        (first,) = wait_until(lambda: children(app.pid), WAIT, "the forwarding process")
        lowered = min(19, base + VIEW_NICENESS)
        # the threads are lowered one by one: what is asserted is where that ends, not a look in between
        wait_until(lambda: yielded(app.pid, base, lowered), WAIT, "every thread but the spawner's lowered")
        assert set(niceness(first).values()) == {base}, "the forwarding process keeps the priority the app was started with"

        os.kill(first, signal.SIGKILL)
        (second,) = wait_until(lambda: [c for c in children(app.pid) if c != first and not pid_gone(c)], WAIT, "a new forwarding process")
        await runs_through(listen, 10)
        assert set(niceness(second).values()) == {base}, "a replacement started after the view yielded is not lowered with it"
        assert niceness(app.pid)[app.pid] == lowered
    finally:
        app.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(app.wait, WAIT)
        finally:
            app.end()
