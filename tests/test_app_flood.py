"""The real app attached to a source far faster than it: a ROUTER on 127.0.0.1 (in
its own thread) sends deltas for as long as the test runs. The app must keep its loop
for the screen and the keys: a key press is answered and the screen repaints while
the flood goes on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import zmq
from polling import eventually, until

from core.session import variant
from core.session.config import load_config
from core.session.engine import Engine
from core.session.store import Status
from tui.app import TracewatchApp

HEADER = {"version": 1, "verifiers": {"version": "0.4.0", "commit": None}, "task": {"type": "T"}}


class FloodingServer:
    """Answers health and cancel; for each run, opens a trace, then every run gets
    deltas as fast as the socket takes them until `stop`, then its reply."""

    def __init__(self, answer_health_after: int = 1) -> None:
        self.answer_health_after = answer_health_after
        """Health checks go unanswered until this many arrived (the first one, asked
        before the runs start, is answered unless this is 0)."""
        self.health_checks = 0
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        # as fast as the client reads, with a bounded backlog: a send waits while
        # this many frames are queued for it
        self.socket.setsockopt(zmq.SNDHWM, 1000)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.socket.setsockopt(zmq.SNDTIMEO, 100)  # so a blocked send sees `close`
        self.socket.bind("tcp://127.0.0.1:0")
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.sent = 0
        self.runs: list[tuple[bytes, bytes]] = []
        self._stop = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="flooding server", daemon=True)
        self._thread.start()

    @property
    def flooding(self) -> bool:
        return not self._stop.is_set()

    def stop_flooding(self) -> None:
        """Send every run its reply; the socket stays open for them to arrive. Never
        waits for the sender: it may be blocked on a full queue that only the app's
        loop (the caller's) drains."""
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        self._closing.set()
        self._thread.join()
        self.socket.close(linger=0)
        self.context.term()

    def _serve(self) -> None:
        pack = msgpack.Packer(use_bin_type=True).pack
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        while not self._stop.is_set():
            while poller.poll(0 if self.runs else 50):
                client, request_id, method, _payload = self.socket.recv_multipart()
                if method == b"run":
                    trace = f"t{len(self.runs)}"
                    self.runs.append((client, request_id))
                    self._send(client, request_id, b"delta", pack({"trace": trace, "open": {**HEADER, "id": trace}}))
                elif method == b"health":
                    self.health_checks += 1
                    if self.health_checks <= self.answer_health_after:
                        self._send(client, request_id, b"reply", pack({"success": True, "error": None}))
                else:
                    self._send(client, request_id, b"reply", pack({"success": True, "error": None, "cancelled": False}))
            for index, (client, request_id) in enumerate(self.runs):
                delta = {"trace": f"t{index}", "set": {"num_total_tokens": self.sent}}
                self._send(client, request_id, b"delta", pack(delta))
        for index, (client, request_id) in enumerate(self.runs):
            reply = {"success": True, "error": None, "head": {"id": f"e{index}"}, "traces": [{"id": f"t{index}", "nodes": 0, "calls": 0}]}
            self._send(client, request_id, b"reply", pack(reply))

    def _send(self, client: bytes, request_id: bytes, kind: bytes, data: bytes) -> None:
        while not self._closing.is_set():
            try:
                self.socket.send_multipart([client, request_id, kind, data])
            except zmq.Again:
                continue
            self.sent += 1
            return


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


async def test_keys_and_repaints_go_on_while_a_fast_source_floods(tmp_path: Path, flood: FloodingServer) -> None:
    engine = Engine(load_config(write_config(tmp_path, flood.address)), session_dir=tmp_path / "session")
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
        await pilot.press("down")
        await until(pilot, lambda: app.selected == "flood/1", "the key press to move the selection")
        await until(pilot, lambda: repaints >= 5, "the screen to repaint")
        assert flood.flooding  # all of it while the source was still flooding
        received = sum(r.deltas for r in store.rollouts.values())
        flood.stop_flooding()
        assert received < flood.sent  # the source was ahead of the client
        await until(pilot, lambda: all(r.status.finished for r in store.rollouts.values()), "both runs to end")
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
        engine = Engine(load_config(write_config(tmp_path, server.address)), session_dir=tmp_path / "session")
        await engine.start()
        store = engine.store
        await eventually(lambda: server.health_checks > 2 * variant.HEALTH_MISSES, what="unanswered health checks")
        assert not any(r.status.finished for r in store.rollouts.values()), [r.reason for r in store.rollouts.values()]
        server.stop_flooding()
        await eventually(lambda: all(r.status.finished for r in store.rollouts.values()), what="both runs to end")
        assert {r.status for r in store.rollouts.values()} == {Status.DONE}, [r.reason for r in store.rollouts.values()]
        await engine.shutdown()
    finally:
        server.close()
