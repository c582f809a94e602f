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
from polling import until

from core.session.config import load_config
from core.session.engine import Engine
from tui.app import TracewatchApp

HEADER = {"version": 1, "verifiers": {"version": "0.4.0", "commit": None}, "task": {"type": "T"}}


class FloodingServer:
    """Answers health and cancel; for each run, opens a trace, then every run gets
    deltas as fast as the socket takes them until `stop`, then its reply."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind("tcp://127.0.0.1:0")
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.sent = 0
        self.runs: list[tuple[bytes, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="flooding server", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
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
        self.socket.send_multipart([client, request_id, kind, data])
        self.sent += 1


@pytest.fixture
def flood() -> Iterator[FloodingServer]:
    server = FloodingServer()
    yield server
    if not server._stop.is_set():
        server.stop()


async def test_keys_and_repaints_go_on_while_a_fast_source_floods(tmp_path: Path, flood: FloodingServer) -> None:
    config = tmp_path / "tracewatch.toml"
    config.write_text(
        "[[variants]]\n"
        'name = "flood"\n'
        f'attach = "{flood.address}"\n'
        'tasks = [{ id = "a", prompt = "p" }, { id = "b", prompt = "p" }]\n'
        'model = "m"\n'
        "max_concurrent = 2\n"
    )
    engine = Engine(load_config(config), session_dir=tmp_path / "session")
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
        assert not flood._stop.is_set()  # all of it while the source was still flooding
        received = sum(r.deltas for r in store.rollouts.values())
        flood.stop()
        assert received < flood.sent  # the source was ahead of the client
        await until(pilot, lambda: all(r.status.finished for r in store.rollouts.values()), "both runs to end")
        await engine.shutdown()
