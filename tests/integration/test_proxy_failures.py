"""A proxy's failure never hangs the driver: verifiers' own EnvClient (which has no
timeout) drives through a real proxy while the app is killed (the forwarder goes on
forwarding, unwatched, until the driver disconnects), the forwarding process is
killed (the app notices, says so, starts a new one on the same address, and the runs
that were in flight get an error reply at once), or idle connections use up the
descriptors (the soft limit is raised; at the limit new connections wait, with a
note, and those open are served)."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import socket
import subprocess
import sys

import pytest
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient as VerifiersClient
from verifiers.v1.types import SamplingConfig

from tests.support.demo_launch import launch, stop
from tests.support.polling import alive, children, eventually, pid_gone, wait_until
from tests.support.proxy_sessions import ProxySessions
from tests.support.tether import TetheredProcess
from tracewatch.core.ports import free_address
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.status import Status
from tracewatch.core.taps.forward_process import UNWATCHED_GRACE

WAIT = 60.0
DRIVER_LATE = 1.0
"""How long after the app's death the late driver starts (well within UNWATCHED_GRACE)."""
SAMPLING = SamplingConfig(temperature=0.3, max_tokens=512)


def task(i: int, scenario: str) -> dict:
    return {"id": f"f{i}", "name": f"{scenario} {i}", "prompt": "p", "scenario": scenario, "kind": "coding"}


@pytest.fixture(scope="module")
def upstream():
    proc, address = launch(speed=20.0, seed=5, stderr=subprocess.DEVNULL)
    yield address
    stop(proc)


async def test_a_killed_app_leaves_the_forwarder_forwarding_until_its_driver_disconnects(upstream) -> None:
    listen = free_address()
    app = TetheredProcess(
        [sys.executable, "-m", "tracewatch.cli", "proxy", "--listen", listen, "--upstream", upstream, "--headless", "--no-record"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    client = VerifiersClient(listen)
    seen: dict[int, int] = {}
    runs: list[asyncio.Future] = []
    forwarding = None
    try:
        await client.wait_for_server_startup(timeout=WAIT)
        (forwarding,) = wait_until(lambda: children(app.pid), WAIT, "the forwarding process")

        def counting(i: int):
            return lambda _delta: seen.__setitem__(i, seen.get(i, 0) + 1)

        runs = [asyncio.ensure_future(client.run(EvalClientConfig(), "demo-model", SAMPLING, task(i, "slow"), counting(i))) for i in range(4)]
        await eventually(lambda: len(seen) == len(runs), WAIT, "every run streaming through the proxy")
        assert not any(run.done() for run in runs), "the runs are mid-way when the app dies"
        os.kill(app.pid, signal.SIGKILL)
        app.wait()
        episodes = await asyncio.wait_for(asyncio.gather(*runs), WAIT)
        assert all(episode.traces and episode.traces[0].nodes for episode in episodes), "every run finished through the orphaned forwarder"
        assert alive(forwarding), "the forwarder stays while its driver is connected"
    finally:
        for run in runs:
            run.cancel()
        await client.close()
        app.end()
    wait_until(lambda: pid_gone(forwarding), WAIT, "the forwarder gone once its driver disconnected")


async def test_a_driver_connecting_as_the_app_dies_is_served(upstream) -> None:
    """Verifiers' driver starting as the app of a freshly started proxy is killed: its
    connection was not yet accepted when the forwarding process counted its drivers, so
    before, it counted none and exited, and the driver got no health reply, ever (2 of
    16 kills). Here the driver starts a second after the app died (its connection in
    flight on a loaded box); the forwarder serves on for `UNWATCHED_GRACE` with no driver."""
    listen = free_address()
    app = TetheredProcess(
        [sys.executable, "-m", "tracewatch.cli", "proxy", "--listen", listen, "--upstream", upstream, "--headless", "--no-record"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    forwarding = None
    client = None
    try:
        (forwarding,) = wait_until(lambda: children(app.pid), WAIT, "the forwarding process")
        first = VerifiersClient(listen)
        try:
            await first.wait_for_server_startup(timeout=WAIT)  # it forwards: the proxy is up
        finally:
            await first.close()
        os.kill(app.pid, signal.SIGKILL)
        app.wait()
        await asyncio.sleep(DRIVER_LATE)  # the scenario, not a wait for anything: a driver arriving after the death
        client = VerifiersClient(listen)
        await client.wait_for_server_startup(timeout=WAIT)
        episode = await asyncio.wait_for(client.run(EvalClientConfig(), "demo-model", SAMPLING, task(0, "normal")), WAIT)
        assert episode.traces and episode.traces[0].nodes, "the run went through the orphaned forwarder"
    finally:
        if client is not None:
            await client.close()
        app.end()
    if forwarding is not None:
        wait_until(lambda: pid_gone(forwarding), WAIT + UNWATCHED_GRACE, "the forwarder gone once no driver is left")


@pytest.fixture
async def proxy_engine(upstream, tmp_path):
    sessions = ProxySessions(upstream, tmp_path / "s")
    yield await sessions.start()
    await sessions.shutdown()


async def test_a_killed_forwarder_is_replaced_on_its_address_and_the_runs_it_carried_fail_at_once(proxy_engine) -> None:
    engine, variant = proxy_engine
    listen, first = variant.listen, variant.forwarder.pid
    client = VerifiersClient(listen)
    runs: list[asyncio.Future] = []
    try:
        await client.wait_for_server_startup(timeout=WAIT)
        runs = [asyncio.ensure_future(client.run(EvalClientConfig(), "demo-model", SAMPLING, task(i, "stuck"))) for i in range(4)]
        carried = await eventually(
            lambda: len(r := [x for x in engine.store.variant_rollouts("px") if x.status is Status.RUNNING]) == len(runs) and r,
            WAIT,
            "every stuck run seen running",
        )
        os.kill(first, signal.SIGKILL)
        # verifiers' client has no timeout: without an answer these would wait forever
        outcomes = await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), WAIT)
        assert all(isinstance(o, RuntimeError) and "forwarding process died" in str(o) for o in outcomes), outcomes
        assert variant.forwarder is not None and variant.forwarder.pid != first and variant.listen == listen
        assert variant.state is VariantState.RUNNING and variant.restarts == 1
        assert "killed by SIGKILL" in (variant.reason or "") and "4 run(s) in flight failed" in (variant.reason or "")
        for rollout in carried:
            assert rollout.status is Status.FAILED and "forwarding process died" in (rollout.reason or "")
        wait_until(lambda: not os.path.exists(f"/proc/{first}"), WAIT, "the dead forwarder reaped, not a zombie")
        after = await asyncio.wait_for(client.run(EvalClientConfig(), "demo-model", SAMPLING, task(9, "normal")), WAIT)
        assert after.traces[0].nodes, "the same client's next run goes through the new forwarder"
        await eventually(
            lambda: any(r.task_data["id"] == "f9" and r.status is Status.DONE for r in engine.store.variant_rollouts("px")),
            WAIT,
            "the new forwarder's run shown done",
        )
    finally:
        for run in runs:
            run.cancel()
        await client.close()


IDLE = 200


def idle_connections(listen: str) -> list[socket.socket]:
    host, port = listen.removeprefix("tcp://").rsplit(":", 1)
    return [socket.create_connection((host, int(port))) for _ in range(IDLE)]


async def drive_normal_runs(listen: str, count: int = 4) -> list:
    client = VerifiersClient(listen)
    try:
        await client.wait_for_server_startup(timeout=WAIT, interval=0.2)
        runs = (client.run(EvalClientConfig(), "demo-model", SAMPLING, task(i, "normal")) for i in range(count))
        return await asyncio.wait_for(asyncio.gather(*runs), WAIT)
    finally:
        await client.close()


def low_soft_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


async def test_the_forwarder_raises_a_low_soft_descriptor_limit_so_idle_connections_do_not_lock_out_a_driver(upstream) -> None:
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 4 * IDLE:
        pytest.skip("the hard descriptor limit leaves no room above 256")
    listen = free_address()
    app = TetheredProcess(
        [sys.executable, "-m", "tracewatch.cli", "proxy", "--listen", listen, "--upstream", upstream, "--headless", "--no-record"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=low_soft_limit,
    )
    idle: list[socket.socket] = []
    try:
        client = VerifiersClient(listen)
        try:
            await client.wait_for_server_startup(timeout=WAIT, interval=0.2)
        finally:
            await client.close()
        (forwarding,) = children(app.pid)
        soft, hard = resource.prlimit(forwarding, resource.RLIMIT_NOFILE)
        assert soft == hard, "the soft limit taken up to the hard one"
        idle = idle_connections(listen)
        episodes = await drive_normal_runs(listen)
        assert len(episodes) == 4 and all(e.traces[0].nodes for e in episodes), "a driver behind 200 idle connections gets its runs through"
    finally:
        for sock in idle:
            sock.close()
        app.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(app.wait, WAIT)
        finally:
            app.end()


async def test_at_the_descriptor_limit_the_forwarder_backs_off_says_so_and_serves_the_connections_it_has(proxy_engine) -> None:
    _engine, variant = proxy_engine
    resource.prlimit(variant.forwarder.pid, resource.RLIMIT_NOFILE, (256, 256))
    client = VerifiersClient(variant.listen)
    idle: list[socket.socket] = []
    try:
        await client.wait_for_server_startup(timeout=WAIT, interval=0.2)  # connected before the limit is reached
        idle = idle_connections(variant.listen)
        await eventually(lambda: any("out of file descriptors (limit 256)" in line for line in variant.log_tail()), WAIT, "the note in the logs")
        runs = (client.run(EvalClientConfig(), "demo-model", SAMPLING, task(i, "normal")) for i in range(4))
        episodes = await asyncio.wait_for(asyncio.gather(*runs), WAIT)
        assert len(episodes) == 4 and all(e.traces[0].nodes for e in episodes), "the connection it has is served"
    finally:
        for sock in idle:
            sock.close()
        await client.close()

