"""The demo server process on a real socket: the wire frame for frame, bad requests
answered and survived, cancels, and a clean exit on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
import zmq
import zmq.asyncio

from tests.support.demo_launch import launch, stop
from tracewatch.core.demo.tasks import DEFAULT_TASKS, SCENARIOS
from tracewatch.core.wire.client import EnvClient, RunFailed, new_request_id
from tracewatch.core.wire.protocol import ABORTED_ERROR, pack, unpack

SPEED = 100.0
DEADLINE = 30.0
TASKS = {task["scenario"]: task for task in DEFAULT_TASKS}


@pytest.fixture(scope="module")
def address():
    proc, address = launch(speed=SPEED, seed=3, stderr=subprocess.DEVNULL)
    yield address
    stop(proc)


class Raw:
    """A bare DEALER, to send what no well-behaved client would."""

    def __init__(self, address: str) -> None:
        self.context = zmq.asyncio.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)

    async def send(self, *frames: bytes) -> bytes:
        request_id = uuid.uuid4().hex.encode()
        await self.socket.send_multipart([request_id, *frames])
        return request_id

    async def reply(self, request_id: bytes) -> dict:
        """The reply for `request_id`, skipping its deltas and anything else."""
        deadline = time.monotonic() + DEADLINE
        while True:
            frames = await asyncio.wait_for(self.socket.recv_multipart(), deadline - time.monotonic())
            assert len(frames) == 3
            if frames[0] == request_id and frames[1] == b"reply":
                return unpack(frames[2])

    def close(self) -> None:
        self.socket.close(linger=0)
        self.context.term()


@pytest.fixture
def raw(address):
    client = Raw(address)
    yield client
    client.close()


RUN = {"client": {}, "model": "demo-model", "sampling": {}}


async def test_health(raw: Raw) -> None:
    assert await raw.reply(await raw.send(b"health", pack({}))) == {"success": True, "error": None}


@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        ((b"run", b"\xc1"), "msgpack"),  # not msgpack at all
        ((b"run", pack({"task_data": {}})), "ValidationError"),  # no client / model / sampling
        ((b"run", pack({**RUN, "task_data": {"scenario": "nope"}})), "unknown scenario 'nope'"),
        ((b"run", pack({**RUN, "task_data": [1, 2]})), "ValidationError"),
        ((b"run", pack({**RUN, "task_data": {"scenario": "scale", "turns": -1}})), "turns must be"),
        ((b"cancel", pack({})), "ValidationError"),
        ((b"frobnicate", pack({})), "unknown method 'frobnicate'"),
    ],
)
async def test_a_bad_request_gets_a_failed_reply(raw: Raw, frames: tuple[bytes, bytes], expected: str) -> None:
    reply = await raw.reply(await raw.send(*frames))
    assert reply["success"] is False
    assert expected.lower() in reply["error"].lower()


async def test_a_cancel_for_an_unknown_run_is_not_an_error(raw: Raw) -> None:
    reply = await raw.reply(await raw.send(b"cancel", pack({"request_id": "no-such-run"})))
    assert reply == {"success": True, "error": None, "cancelled": False}


async def test_a_frame_of_the_wrong_shape_is_skipped(raw: Raw) -> None:
    await raw.socket.send_multipart([b"just-one-frame"])
    await raw.socket.send_multipart([b"a", b"b", b"c", b"d"])
    health = await raw.send(b"health", pack({}))
    # the next frame back answers the health request: the bad ones got nothing
    frames = await asyncio.wait_for(raw.socket.recv_multipart(), DEADLINE)
    assert frames[0] == health and unpack(frames[2])["success"] is True


async def test_the_server_keeps_serving_runs_through_bad_requests(address: str, raw: Raw) -> None:
    client = EnvClient(address)
    try:
        run = asyncio.create_task(client.run(TASKS["normal"], {}, "demo-model", {}))
        for frames in [(b"run", b"\xc1"), (b"nope", b""), (b"cancel", pack({"request_id": "x"}))]:
            await raw.reply(await raw.send(*frames))
        await raw.socket.send_multipart([b"x"])
        record = await asyncio.wait_for(run, DEADLINE)
        assert record["ok"] is True
    finally:
        await client.close()


async def test_stuck_runs_until_cancelled_then_replies_aborted(address: str) -> None:
    client = EnvClient(address)
    try:
        request_id = new_request_id()
        waiting = asyncio.Event()

        def on_delta(delta: dict) -> None:
            # the second request's preview: tool results the model will never answer
            if any(message["role"] == "tool" for message in delta.get("pending", [])):
                waiting.set()

        stuck = asyncio.create_task(
            client.run(TASKS["stuck"], {}, "demo-model", {}, on_delta, request_id=request_id)
        )
        await asyncio.wait_for(waiting.wait(), DEADLINE)
        # a whole normal rollout finishes meanwhile; the stuck one does not
        assert (await asyncio.wait_for(client.run(TASKS["normal"], {}, "demo-model", {}), DEADLINE))["ok"]
        assert not stuck.done()
        assert await client.cancel(request_id) is True
        with pytest.raises(RunFailed) as failed:
            await asyncio.wait_for(stuck, DEADLINE)
        assert failed.value.error == ABORTED_ERROR and failed.value.aborted
        assert await client.cancel(request_id) is False
    finally:
        await client.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_shuts_down_cleanly_and_aborts_runs_in_flight(sig: signal.Signals) -> None:
    proc, address = launch(speed=SPEED, seed=1, stderr=subprocess.PIPE)
    client = EnvClient(address)
    try:
        assert await client.health(timeout=DEADLINE)
        streaming = asyncio.Event()
        stuck = asyncio.create_task(
            client.run(TASKS["stuck"], {}, "demo-model", {}, lambda delta: streaming.set())
        )
        await asyncio.wait_for(streaming.wait(), DEADLINE)  # the server holds the run
        os.kill(proc.pid, sig)
        with pytest.raises(RunFailed) as failed:
            await asyncio.wait_for(stuck, DEADLINE)
        assert failed.value.aborted
        assert await asyncio.to_thread(proc.wait, DEADLINE) == 0
        assert f"demo env server down ({sig.name})" in proc.stderr.read().decode()
    finally:
        await client.close()
        stop(proc)
        proc.stderr.close()


def test_print_tasks_lists_every_scenario_a_human_watches() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tracewatch.core.demo", "--print-tasks"], capture_output=True, text=True, timeout=DEADLINE, check=True
    ).stdout
    tasks = [json.loads(line) for line in out.splitlines()]
    assert tasks == DEFAULT_TASKS
    assert {task["scenario"] for task in tasks} == set(SCENARIOS) - {"scale"}
    assert len({task["id"] for task in tasks}) == len(tasks)


def test_the_address_is_the_first_stdout_line() -> None:
    proc, address = launch(speed=SPEED, stderr=subprocess.DEVNULL)
    try:
        assert address.startswith("tcp://127.0.0.1:") and not address.endswith(":0")
    finally:
        assert stop(proc) == 0
