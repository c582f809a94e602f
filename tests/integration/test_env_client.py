"""EnvClient against a scripted ROUTER on 127.0.0.1: the test plays the env server
frame by frame, so routing, failure isolation, cancels and shutdown are checked on a
real socket without a verifiers server."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import msgpack
import pytest
import zmq
import zmq.asyncio

from tests.support.polling import MARGIN, eventually
from tracewatch.core.ports import free_address
from tracewatch.core.wire.assembly import AssemblyError, EpisodeAssembly
from tracewatch.core.wire.client import EnvClient, RunFailed, ServerGone, new_request_id

CLIENT = {"base_url": "http://127.0.0.1:9/v1", "api_key_var": "NONE"}
DEADLINE = 3 * MARGIN


def pack(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


@dataclass
class Request:
    client: bytes
    id: str
    method: str
    payload: dict


class Router:
    """The server side of the wire: receives requests, sends whatever frames a test
    scripts."""

    def __init__(self) -> None:
        self.context = zmq.asyncio.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind("tcp://127.0.0.1:0")
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)

    async def recv(self, method: str | None = None) -> Request:
        """The next request (of `method`, skipping others), within the deadline."""
        while True:
            frames = await asyncio.wait_for(self.socket.recv_multipart(), DEADLINE)
            client, request_id, name, payload = frames
            request = Request(client, request_id.decode(), name.decode(), msgpack.unpackb(payload))
            if method is None or request.method == method:
                return request

    async def send(self, request: Request, kind: bytes, data: bytes) -> None:
        await self.socket.send_multipart([request.client, request.id.encode(), kind, data])

    async def delta(self, request: Request, delta: dict) -> None:
        await self.send(request, b"delta", pack(delta))

    async def reply(self, request: Request, reply: dict) -> None:
        await self.send(request, b"reply", pack(reply))

    def close(self) -> None:
        self.socket.close(linger=0)
        self.context.term()


@pytest.fixture
async def router():
    server = Router()
    yield server
    server.close()


@pytest.fixture
def drops() -> list[str]:
    """Why each frame the `client` fixture dropped was dropped."""
    return []


@pytest.fixture
async def client(router, drops):
    env = EnvClient(router.address, on_drop=drops.append)
    yield env
    await env.close()


def opening(trace: str, content: str) -> dict:
    header = {"version": 1, "id": trace, "verifiers": {"version": "0.4.0", "commit": None}, "task": {"type": "T"}}
    return {"trace": trace, "open": header, "set": {"ok": False}, "pending": [{"role": "user", "content": content}]}


def turn(trace: str, index: int) -> dict:
    node = {"parent": index - 1 if index else None, "semantic_parents": [], "message": {"role": "user", "content": str(index)}}
    return {"trace": trace, "nodes": [node], "calls": [{"node": index}]}


def success(trace: str, nodes: int) -> dict:
    return {"success": True, "error": None, "head": {"id": f"episode-{trace}"}, "traces": [{"id": trace, "nodes": nodes, "calls": nodes}]}


async def test_deltas_reach_their_own_run_and_on_delta(router, client, drops):
    seen: dict[str, list[dict]] = {"a": [], "b": []}
    ids = {"a": new_request_id(), "b": new_request_id()}
    live = EpisodeAssembly()
    runs = {
        name: asyncio.create_task(
            client.run(
                {"prompt": name},
                CLIENT,
                "m",
                {"temperature": 0.0},
                seen[name].append,
                request_id=ids[name],
                assembly=live if name == "a" else None,
            )
        )
        for name in ids
    }
    requests = {}
    for _ in ids:
        request = await router.recv("run")
        requests[request.payload["task_data"]["prompt"]] = request
    # the caller's request_id is the wire id, and the payload is verifiers' RunRequest
    assert {name: r.id for name, r in requests.items()} == ids
    assert requests["a"].payload["client"]["base_url"] == CLIENT["base_url"]
    assert requests["a"].payload["model"] == "m" and requests["a"].payload["sampling"]["temperature"] == 0.0
    assert sorted(client.in_flight) == sorted(ids.values())
    a, b = requests["a"], requests["b"]
    await router.delta(a, opening("ta", "for a"))
    await router.delta(b, opening("tb", "for b"))
    await router.delta(b, turn("tb", 0))
    await router.delta(a, turn("ta", 0))
    await router.delta(a, turn("ta", 1))
    await eventually(lambda: len(seen["a"]) == 3, what="a's deltas")
    # the live assembly the caller passed is readable mid-run
    assert len(live.traces["ta"]["nodes"]) == 2 and live.traces["ta"]["pending"] == []
    await router.reply(b, success("tb", 1))
    await router.reply(a, success("ta", 2))
    record_a, record_b = await asyncio.wait_for(asyncio.gather(runs["a"], runs["b"]), DEADLINE)
    assert [d["trace"] for d in seen["a"]] == ["ta"] * 3
    assert [d["trace"] for d in seen["b"]] == ["tb"] * 2
    assert record_a["id"] == "episode-ta" and [t["id"] for t in record_a["traces"]] == ["ta"]
    assert [n["message"]["content"] for n in record_a["traces"][0]["nodes"]] == ["0", "1"]
    assert [n["message"]["content"] for n in record_b["traces"][0]["nodes"]] == ["0"]
    assert client.in_flight == [] and drops == []


async def test_health(router, client):
    answered = asyncio.create_task(client.health(timeout=DEADLINE))
    request = await router.recv("health")
    await router.reply(request, {"success": True, "error": None})
    assert await answered is True
    # a server that never answers: health says so within its timeout
    assert await client.health(timeout=0.2) is False


async def test_an_unreadable_health_reply_is_unhealthy_and_cancels_nothing(router, client, drops):
    answered = asyncio.create_task(client.health(timeout=DEADLINE))
    request = await router.recv()
    await router.send(request, b"reply", b"\xc1")
    assert await answered is False
    assert len(drops) == 1
    # the next frame the server sees is the next request: no cancel went out for it
    answered = asyncio.create_task(client.health(timeout=DEADLINE))
    request = await router.recv()
    assert request.method == "health"
    await router.reply(request, {"success": True, "error": None})
    assert await answered is True


async def test_wait_for_server_startup_gives_up_at_its_deadline(router, client):
    waits: list[float] = []
    with pytest.raises(TimeoutError, match="did not answer health"):
        await client.wait_for_server_startup(timeout=0.5, interval=0.05, on_wait=waits.append)
    assert waits and all(0.0 <= left <= 0.5 for left in waits)


async def test_unreadable_frames_are_counted_and_other_runs_go_on(router, client, drops):
    good = asyncio.create_task(client.run({}, CLIENT, "m"))
    broken = asyncio.create_task(client.run({}, CLIENT, "m"))
    first, second = await router.recv("run"), await router.recv("run")
    await router.delta(first, opening("t1", "x"))
    await router.socket.send_multipart([first.client, first.id.encode(), b"delta"])  # 2 frames
    await router.send(first, b"progress", pack({}))  # a kind this client does not know
    await router.send(second, b"delta", b"\xc1 not msgpack")  # fails only its own run
    with pytest.raises(AssemblyError, match="could not be applied"):
        await asyncio.wait_for(broken, DEADLINE)
    assert len(drops) == 3
    await router.delta(first, turn("t1", 0))
    await router.reply(first, success("t1", 1))
    record = await asyncio.wait_for(good, DEADLINE)
    assert len(record["traces"][0]["nodes"]) == 1
    # the broken run is stopped on the server too
    cancel = await router.recv("cancel")
    assert cancel.payload == {"request_id": second.id}


async def test_a_bad_delta_fails_only_its_run_and_cancels_it_on_the_server(router, client):
    seen: list[dict] = []
    good = asyncio.create_task(client.run({}, CLIENT, "m", on_delta=seen.append))
    bad = asyncio.create_task(client.run({}, CLIENT, "m"))
    first, second = await router.recv("run"), await router.recv("run")
    await router.delta(first, opening("t1", "x"))
    await router.delta(second, opening("t2", "y"))
    await router.delta(second, {"trace": "t2", "links": {7: [{"node": 0, "type": "a"}]}})
    with pytest.raises(AssemblyError, match="names node 7"):
        await asyncio.wait_for(bad, DEADLINE)
    cancel = await router.recv("cancel")
    assert cancel.payload == {"request_id": second.id}
    assert second.id not in client.in_flight and first.id in client.in_flight
    # the server's late reply to the failed run is ignored, the other run completes
    await router.reply(second, {"success": False, "error": "Cancelled: rollout aborted"})
    await router.delta(first, turn("t1", 0))
    await router.reply(first, success("t1", 1))
    assert (await asyncio.wait_for(good, DEADLINE))["id"] == "episode-t1"
    assert len(seen) == 2


async def test_cancelling_the_awaiting_task_sends_cancel_with_the_run_id(router, client):
    request_id = new_request_id()
    run = asyncio.create_task(client.run({}, CLIENT, "m", request_id=request_id))
    request = await router.recv("run")
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    cancel = await router.recv("cancel")
    assert cancel.payload == {"request_id": request_id} == {"request_id": request.id}
    assert cancel.id != request_id
    assert client.in_flight == []


async def test_cancel_request_and_aborted_reply(router, client):
    request_id = new_request_id()
    run = asyncio.create_task(client.run({}, CLIENT, "m", request_id=request_id))
    request = await router.recv("run")
    cancelling = asyncio.create_task(client.cancel(request_id))
    cancel = await router.recv("cancel")
    assert cancel.payload == {"request_id": request_id}
    await router.reply(cancel, {"success": True, "error": None, "cancelled": True})
    await router.reply(request, {"success": False, "error": "Cancelled: rollout aborted"})
    assert await asyncio.wait_for(cancelling, DEADLINE) is True
    with pytest.raises(RunFailed) as failed:
        await asyncio.wait_for(run, DEADLINE)
    assert failed.value.aborted


async def test_a_failed_run_is_not_aborted(router, client):
    run = asyncio.create_task(client.run({}, CLIENT, "m"))
    request = await router.recv("run")
    await router.reply(request, {"success": False, "error": "ValueError: bad task"})
    with pytest.raises(RunFailed, match="bad task") as failed:
        await asyncio.wait_for(run, DEADLINE)
    assert not failed.value.aborted


async def test_finish_mismatch_fails_the_run(router, client):
    run = asyncio.create_task(client.run({}, CLIENT, "m"))
    request = await router.recv("run")
    await router.delta(request, opening("t1", "x"))
    await router.reply(request, success("t1", 2))
    with pytest.raises(AssemblyError, match="assembled 0 nodes / 0 calls, the server reports 2 / 2"):
        await asyncio.wait_for(run, DEADLINE)


async def test_abandon_all_fails_waiting_runs(router, client):
    run = asyncio.create_task(client.run({}, CLIENT, "m"))
    await router.recv("run")
    assert client.abandon_all("server process exited") == 1
    with pytest.raises(ServerGone, match="server process exited"):
        await asyncio.wait_for(run, DEADLINE)


async def test_close_leaves_no_task_or_socket_and_a_new_client_works(router):
    first = EnvClient(router.address)
    run = asyncio.create_task(first.run({}, CLIENT, "m"))
    await router.recv("run")
    await first.close()
    with pytest.raises(ServerGone):
        await asyncio.wait_for(run, DEADLINE)
    assert first._socket.closed and first._context.closed
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    assert await first.health(timeout=DEADLINE) is False  # closed: it says so at once
    with pytest.raises(ServerGone):
        await first.run({}, CLIENT, "m")
    await first.close()  # idempotent

    second = EnvClient(router.address)
    try:
        answered = asyncio.create_task(second.health(timeout=DEADLINE))
        request = await router.recv("health")
        await router.reply(request, {"success": True, "error": None})
        assert await answered is True
    finally:
        await second.close()
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_a_cancel_right_before_close_still_reaches_the_server(router):
    """Quitting the app right after cancelling a run must not leave it running."""
    env = EnvClient(router.address)
    request_id = new_request_id()
    run = asyncio.create_task(env.run({}, CLIENT, "m", request_id=request_id))
    await router.recv("run")
    run.cancel()
    await env.close()
    assert (await router.recv("cancel")).payload == {"request_id": request_id}
    assert run.cancelled()


async def test_a_broken_socket_fails_waiting_runs_instead_of_hanging():
    """If receiving fails outright, every run still waiting learns it at once."""
    client = EnvClient(free_address())
    run = asyncio.ensure_future(client.run({"id": "t"}, {}, "m", {}))
    await eventually(lambda: client._receiver is not None, what="the client's receiver")
    client._socket.close(linger=0)  # what a dead context does to a receive in progress
    with pytest.raises(ServerGone, match="connection to .* failed"):
        await asyncio.wait_for(run, DEADLINE)
    await client.close()
