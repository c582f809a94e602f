"""The wire proxy: frames pass byte for byte both ways (a scripted ROUTER upstream and
raw DEALER drivers), verifiers' own EnvClient drives the demo server through it while
the store shows every run, a cancel from the view reaches the server, a down upstream
is waited for, and bad addresses are refused with a clear error."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.episode import WireEpisode
from verifiers.v1.serve import EnvClient as VerifiersClient
from verifiers.v1.types import SamplingConfig

from tests.support.demo_launch import launch, stop
from tests.support.polling import alive, children, eventually, pid_gone, wait_until
from tests.support.proxy_sessions import ProxySessions
from tests.support.tether import TetheredProcess, run_tethered
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.ports import free_address
from tracewatch.core.session.config import Config
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.status import Status
from tracewatch.core.taps.forwarder import TO_DRIVER, TO_SERVER, Forwarder
from tracewatch.core.wire.client import EnvClient

SPEED = 60.0
WAIT = 60.0
SAMPLING = {"temperature": 0.3, "max_tokens": 512}


def task(i: int, scenario: str = "normal") -> dict:
    return {"id": f"p{i}", "name": f"{scenario} {i}", "prompt": "p", "scenario": scenario, "kind": "coding"}


@pytest.fixture(scope="module")
def upstream():
    proc, address = launch(speed=SPEED, seed=3, stderr=subprocess.DEVNULL)
    yield address
    stop(proc)


@pytest.fixture
async def proxy_engine(upstream, tmp_path):
    sessions = ProxySessions(upstream, tmp_path / "s")
    yield sessions.start
    await sessions.shutdown()


class ScriptedServer:
    """A ROUTER that records every message and answers each with scripted frames."""

    def __init__(self, context: zmq.Context, replies: list[list[bytes]]) -> None:
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.replies = replies
        self.received: dict[bytes, list[list[bytes]]] = {}

    def serve(self, messages: int) -> None:
        for _ in range(messages):
            identity, *frames = self.socket.recv_multipart()
            self.received.setdefault(identity, []).append(frames)
            for reply in self.replies:
                self.socket.send_multipart([identity, *reply])


frame = st.binary(max_size=64)
message = st.lists(frame, min_size=1, max_size=4)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(message, min_size=1, max_size=5), replies=st.lists(message, min_size=1, max_size=4))
def test_every_frame_passes_byte_for_byte_in_order_both_ways(requests, replies) -> None:
    """Any frames at all (not only the protocol's) reach the other side unchanged and in
    order, for two drivers at once, and the watcher gets a copy of each."""
    context = zmq.Context()
    server = ScriptedServer(context, replies)
    forwarder = Forwarder("tcp://127.0.0.1:0", server.address, health_interval=None)
    forwarder.start()
    drivers = [context.socket(zmq.DEALER) for _ in range(2)]
    try:
        for driver in drivers:
            driver.setsockopt(zmq.LINGER, 0)
            driver.connect(forwarder.listen)
        serving = threading.Thread(target=server.serve, args=(2 * len(requests),), daemon=True)
        serving.start()
        for request in requests:
            for driver in drivers:
                driver.send_multipart(request)
        got = [[driver.recv_multipart() for _ in range(len(requests) * len(replies))] for driver in drivers]
        serving.join(WAIT)
        assert got == [[reply for _ in requests for reply in replies]] * 2
        # the server sees one peer per driver, each one's messages in the order it sent them
        assert list(server.received.values()) == [requests, requests]
        copies = wait_until(lambda: forwarder.forwarded >= 2 * len(requests) * (1 + len(replies)) and forwarder.take(10_000))
        assert sorted(c.frames for c in copies if c.direction == TO_SERVER) == sorted(requests * 2)
        assert [c.frames for c in copies if c.direction == TO_DRIVER] == got[0] + got[1] or sorted(
            c.frames for c in copies if c.direction == TO_DRIVER
        ) == sorted(got[0] + got[1])
        assert forwarder.dropped == 0
    finally:
        forwarder.stop()
        for driver in drivers:
            driver.close()
        server.socket.close()
        context.term()


async def test_verifiers_client_through_the_proxy_gets_what_it_gets_direct_and_the_store_shows_each_run(
    proxy_engine, upstream, tmp_path
) -> None:
    from tracewatch.core.recordings.recorder import Recorder

    recording = tmp_path / "proxy.twrec"
    engine, variant = await proxy_engine(Recorder(recording, meta={}))
    tasks = [task(0), task(1, "multi-agent"), task(2, "failing")]

    async def drive(address: str) -> list[WireEpisode]:
        client = VerifiersClient(address)
        try:
            await client.wait_for_server_startup(timeout=WAIT)
            runs = (client.run(EvalClientConfig(), "demo-model", SamplingConfig(**SAMPLING), t) for t in tasks)
            return await asyncio.wait_for(asyncio.gather(*runs), WAIT)
        finally:
            await client.close()

    via_proxy = await drive(variant.listen)
    direct = await drive(upstream)
    for proxied, straight in zip(via_proxy, direct, strict=True):
        assert [len(t.nodes) for t in proxied.traces] == [len(t.nodes) for t in straight.traces]
        assert proxied.ok == straight.ok
    rollouts = await eventually(
        lambda: (r := list(engine.store.variant_rollouts("px"))) and all(x.status.finished for x in r) and r,
        WAIT,
        "every proxied run ended in the store",
    )
    by_task = {r.task_data["id"]: r for r in rollouts}
    assert by_task["p0"].status is Status.DONE and by_task["p1"].status is Status.DONE
    assert by_task["p2"].status is Status.FAILED
    assert by_task["p0"].note == "model demo-model · temperature 0.3 · max_tokens 512"
    for episode, t in zip(via_proxy, tasks):
        record = by_task[t["id"]].record
        assert record is not None and WireEpisode.model_validate(record).model_dump() == episode.model_dump()
    assert variant.frames["health"] >= 1 and variant.frames["run"] == 3
    await engine.shutdown()
    opened = OpenedRecording(recording)
    listed = {r.key: r.ending for r in opened.store.rollouts.values()}
    assert listed == {r.key: r.ending for r in rollouts}, "an opened recording says how each ended, and why"


async def test_cancel_from_the_view_sends_a_real_cancel_and_the_driver_gets_verifiers_aborted_reply(proxy_engine, tmp_path) -> None:
    from tracewatch.core.recordings.recorder import Recorder

    recording = tmp_path / "cancel.twrec"
    engine, variant = await proxy_engine(Recorder(recording, meta={}))
    client = VerifiersClient(variant.listen)
    try:
        run = asyncio.ensure_future(
            client.run(EvalClientConfig(), "demo-model", SamplingConfig(**SAMPLING), task(7, "stuck"))
        )
        key = await eventually(lambda: next(iter(engine.store.variants["px"]), None), WAIT, "the run in the store")
        assert engine.cancel_rollout(key)
        with pytest.raises(RuntimeError, match="Cancelled: rollout aborted"):
            await asyncio.wait_for(run, WAIT)
        await eventually(lambda: engine.store.rollouts[key].status is Status.CANCELLED, WAIT, "the rollout cancelled")
        assert variant.frames["cancel"] == 0  # ours went on our own socket, not a driver's
    finally:
        await client.close()
    assert variant.cancel_unavailable and not variant.can_cancel
    await engine.shutdown()
    assert OpenedRecording(recording).store.rollouts[key].status is Status.CANCELLED, "the recording says the run was cancelling"


async def test_a_down_upstream_gets_no_answer_until_it_comes_up(proxy_engine) -> None:
    upstream = free_address()
    _engine, variant = await proxy_engine(upstream=upstream)
    client = EnvClient(variant.listen)
    proc = None
    try:
        assert not await client.health(timeout=0.5)
        await eventually(lambda: variant.forwarder.upstream_ok is False, WAIT, "the proxy noticing the upstream is down")
        proc, _ = await asyncio.to_thread(launch, speed=SPEED, address=upstream, stderr=subprocess.DEVNULL)
        await client.wait_for_server_startup(timeout=WAIT)
        await eventually(lambda: variant.forwarder.upstream_ok, WAIT, "the proxy seeing the upstream healthy")
    finally:
        await client.close()
        if proc is not None:
            stop(proc)


def test_a_view_that_falls_behind_drops_copies_never_frames(upstream) -> None:
    forwarder = Forwarder("tcp://127.0.0.1:0", upstream, capacity=3)
    forwarder.start()

    async def drive() -> dict:
        client = EnvClient(forwarder.listen)
        try:
            return await asyncio.wait_for(client.run(task(9), {}, "demo-model", SAMPLING), WAIT)
        finally:
            await client.close()

    try:
        record = asyncio.run(drive())
        assert record["traces"] and record["traces"][0]["nodes"]
        assert forwarder.dropped == forwarder.forwarded - 3 > 0
    finally:
        forwarder.stop()


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_tethered(
        [sys.executable, "-m", "tracewatch.cli", "proxy", *args, "--headless", "--no-record"],
        capture_output=True, text=True, timeout=WAIT,
    )


def test_a_listen_address_in_use_is_a_clear_error(upstream) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = cli("--listen", f"tcp://127.0.0.1:{taken.getsockname()[1]}", "--upstream", upstream)
    assert result.returncode == 2
    assert "cannot listen on tcp://127.0.0.1:" in result.stderr and "in use" in result.stderr


def test_an_upstream_that_is_not_an_env_server_is_a_clear_error() -> None:
    with socket.socket() as http:
        http.bind(("127.0.0.1", 0))
        http.listen()
        result = cli("--listen", free_address(), "--upstream", f"tcp://127.0.0.1:{http.getsockname()[1]}")
    assert result.returncode == 2
    assert "not an env server" in result.stderr


def test_the_config_form_builds_a_proxy_variant(tmp_path) -> None:
    from tracewatch.core.session.config import TapVariantConfig, load_config

    path = tmp_path / "p.toml"
    path.write_text(
        '[defaults]\nmodel = "m"\ntasks = [{ prompt = "x" }]\n'
        '[[variants]]\nname = "tap"\nproxy = { listen = "tcp://127.0.0.1:5999", upstream = "tcp://127.0.0.1:5000" }\n'
    )
    (variant,) = load_config(path).variants
    assert isinstance(variant, TapVariantConfig) and variant.proxy.upstream == "tcp://127.0.0.1:5000"
    path.write_text('[[variants]]\nname = "tap"\nproxy = { listen = "tcp://127.0.0.1:5999", upstream = "http://x" }\n')
    with pytest.raises(Exception, match=r"variants\[0\]\.proxy\.upstream: expected tcp://host:port"):
        load_config(path)


def test_the_config_forms_of_the_eval_and_the_relay_and_one_tap_per_variant(tmp_path) -> None:
    from tracewatch.core.session.config import TapVariantConfig, load_config
    from tracewatch.core.session.config_errors import ConfigError

    path = tmp_path / "taps.toml"
    path.write_text(
        '[[variants]]\nname = "ev"\neval = ["vf-eval", "@", "eval.toml", "--no-push"]\ngrace_seconds = 3.0\n'
        '[[variants]]\nname = "rl"\nrelay = "tcp://127.0.0.1:7000"\n'
    )
    ev, rl = load_config(path).variants
    assert isinstance(ev, TapVariantConfig) and ev.eval == ["vf-eval", "@", "eval.toml", "--no-push"] and ev.grace_seconds == 3.0
    assert isinstance(rl, TapVariantConfig) and rl.relay == "tcp://127.0.0.1:7000"
    path.write_text('[[variants]]\nname = "both"\neval = ["vf-eval"]\nrelay = "tcp://127.0.0.1:7000"\n')
    with pytest.raises(ConfigError, match="expected exactly one of proxy"):
        load_config(path)
    path.write_text('[[variants]]\nname = "ev"\neval = "vf-eval @ eval.toml"\n')
    with pytest.raises(ConfigError, match=r'variants\[0\]\.eval: expected a list of arguments, not one string: eval = \["vf-eval", "@", "eval.toml"\]'):
        load_config(path)



async def test_a_taken_listen_address_fails_the_variant_with_the_forwarders_own_words(upstream, tmp_path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        engine = LiveSession(Config.for_proxy(f"tcp://127.0.0.1:{taken.getsockname()[1]}", upstream, "px"), session_dir=tmp_path / "s")
        await engine.start()
        variant = engine.variants["px"]
        await asyncio.wait_for(variant.wait(), WAIT)
        await engine.shutdown()
    assert variant.state is VariantState.FAILED and "in use" in (variant.reason or "")


def test_the_forwarding_process_ends_when_the_app_dies_even_by_sigkill(upstream) -> None:
    with TetheredProcess([sys.executable, "-c", APP_THAT_DIES, upstream], stdout=subprocess.PIPE, text=True) as app:
        assert app.stdout is not None
        pid = int(app.stdout.readline())
        assert alive(pid)
        os.kill(app.pid, signal.SIGKILL)
        app.wait()
        wait_until(lambda: pid_gone(pid), WAIT, "the forwarding process gone with the app")


APP_THAT_DIES = """
import sys, time
from tracewatch.core.taps.forward_process import ForwardingProcess
forwarder = ForwardingProcess("tcp://127.0.0.1:0", sys.argv[1])
forwarder.start()
print(forwarder.pid, flush=True)
time.sleep(3600)
"""


async def test_headless_proxy_prints_the_same_rollout_lines_as_attach_and_records(upstream, tmp_path) -> None:
    listen = free_address()
    recording = tmp_path / "px.twrec"
    proxy = TetheredProcess(
        [sys.executable, "-m", "tracewatch.cli", "proxy", "--listen", listen, "--upstream", upstream, "--name", "px", "--headless", "--record", str(recording)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        client = EnvClient(listen)
        try:
            await client.wait_for_server_startup(timeout=WAIT)
            await asyncio.wait_for(asyncio.gather(*(client.run(task(i), {}, "demo-model", SAMPLING) for i in (0, 1))), WAIT)
        finally:
            await client.close()
    finally:
        proxy.send_signal(signal.SIGINT)
        try:
            out, err = await asyncio.to_thread(proxy.communicate, timeout=WAIT)
        finally:
            proxy.end()
    assert proxy.returncode == 130, out + err  # a headless proxy runs until Ctrl-C, as any interrupted run
    for i in (0, 1):
        assert re.search(rf"px/\d \[normal {i}\] done · reward 1 · \d+ turns · \d+ tokens · [\d.]+s", out), out
    assert "px: done; 2 done; mean reward 1.000" in out
    assert sorted(r.status for r in OpenedRecording(recording).store.rollouts.values()) == [Status.DONE, Status.DONE]


async def test_sigterm_stops_a_headless_proxy_mid_stream_and_leaves_no_process(upstream) -> None:
    """SIGTERM ends a headless proxy as Ctrl-C does (exit 143, the summary printed)
    while deltas stream through it, and its forwarding process goes with it."""
    listen = free_address()
    proxy = TetheredProcess(
        [sys.executable, "-m", "tracewatch.cli", "proxy", "--listen", listen, "--upstream", upstream, "--name", "px", "--headless", "--no-record"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    client = EnvClient(listen)
    deltas: list[dict] = []
    runs: list[asyncio.Future] = []
    try:
        await client.wait_for_server_startup(timeout=WAIT)
        (forwarding,) = wait_until(lambda: children(proxy.pid), WAIT, "the forwarding process")
        scale = [{**task(i, "scale"), "turns": 200, "tokens": 2000} for i in range(16)]
        runs = [asyncio.ensure_future(client.run(t, {}, "demo-model", SAMPLING, deltas.append)) for t in scale]
        await eventually(lambda: len(deltas) > 50, WAIT, "deltas streaming through the proxy")
        proxy.send_signal(signal.SIGTERM)
        out, err = await asyncio.to_thread(proxy.communicate, timeout=WAIT)
    finally:
        for run in runs:
            run.cancel()
        await client.close()
        proxy.end()
    assert proxy.returncode == 143, out + err
    assert f"SIGTERM: stopping the viewer; drivers pointed at {listen} lose their route to {upstream}" in out, out
    assert "cancelling" not in out, "a proxy's stop cancels no run: the server is not ours"
    assert re.search(r"^px: done; .*\d+ unobserved", out, re.MULTILINE) and not re.search(r"^px: .*failed", out, re.MULTILINE), out
    wait_until(lambda: pid_gone(forwarding), WAIT, "the forwarding process gone with the proxy")
