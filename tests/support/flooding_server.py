"""A source far faster than any client: a ROUTER on 127.0.0.1 in its own process (so
it never shares the client's interpreter lock) that answers health and cancel, opens
a trace for each run, then sends every run deltas as fast as the socket takes them
until told to stop, then its reply. Its counters live in shared memory so a test reads
what it did: frames sent, sends held back by a full queue (the client was behind),
health checks seen."""

from __future__ import annotations

import multiprocessing
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event

import msgpack
import zmq

HEADER = {"version": 1, "verifiers": {"version": "0.4.0", "commit": None}, "task": {"type": "T"}}
QUEUE_LIMIT = 1000
"""Frames queued for a client before a send waits: the backlog is bounded."""


class FloodingServer:
    def __init__(self, answer_health_after: int = 1) -> None:
        """Health checks go unanswered once more than `answer_health_after` arrived
        (the first one, asked before the runs start, is answered unless this is 0)."""
        spawn = multiprocessing.get_context("spawn")
        self._stop = spawn.Event()
        self._closing = spawn.Event()
        self._sent: Synchronized[int] = spawn.Value("q", 0, lock=False)
        self._held_back: Synchronized[int] = spawn.Value("q", 0, lock=False)
        self._health_checks: Synchronized[int] = spawn.Value("q", 0, lock=False)
        receive_address, send_address = spawn.Pipe(duplex=False)
        self._process = spawn.Process(
            target=_serve,
            args=(send_address, self._stop, self._closing, self._sent, self._held_back, self._health_checks, answer_health_after),
            name="flooding server",
            daemon=True,
        )
        self._process.start()
        if not receive_address.poll(60):
            self._process.kill()
            raise RuntimeError("the flooding server never said where it listens")
        self.address: str = receive_address.recv()

    @property
    def sent(self) -> int:
        return self._sent.value

    @property
    def held_back(self) -> int:
        """Sends that found the client's queue full: the source was ahead of it."""
        return self._held_back.value

    @property
    def health_checks(self) -> int:
        return self._health_checks.value

    @property
    def flooding(self) -> bool:
        return not self._stop.is_set()

    def stop_flooding(self) -> None:
        """Send every run its reply; the socket stays open for them to arrive. Never
        waits for the server: it may be held back by a queue only the caller drains."""
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        self._closing.set()
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


def _serve(
    tell_address: multiprocessing.connection.Connection,
    stop: Event,
    closing: Event,
    sent: Synchronized[int],
    held_back: Synchronized[int],
    health_checks: Synchronized[int],
    answer_health_after: int,
) -> None:
    context = zmq.Context()
    socket = context.socket(zmq.ROUTER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SNDHWM, QUEUE_LIMIT)
    socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
    socket.setsockopt(zmq.SNDTIMEO, 100)  # so a held-back send sees `closing`
    socket.bind("tcp://127.0.0.1:0")
    tell_address.send(socket.getsockopt_string(zmq.LAST_ENDPOINT))
    pack = msgpack.Packer(use_bin_type=True).pack
    runs: list[tuple[bytes, bytes]] = []

    def send(client: bytes, request_id: bytes, kind: bytes, data: bytes) -> None:
        while not closing.is_set():
            try:
                socket.send_multipart([client, request_id, kind, data], zmq.NOBLOCK)
            except zmq.Again:
                held_back.value += 1
                try:
                    socket.send_multipart([client, request_id, kind, data])
                except zmq.Again:
                    continue
            sent.value += 1
            return

    poller = zmq.Poller()
    poller.register(socket, zmq.POLLIN)
    while not stop.is_set():
        while poller.poll(0 if runs else 50):
            client, request_id, method, _payload = socket.recv_multipart()
            if method == b"run":
                trace = f"t{len(runs)}"
                runs.append((client, request_id))
                send(client, request_id, b"delta", pack({"trace": trace, "open": {**HEADER, "id": trace}}))
            elif method == b"health":
                health_checks.value += 1
                if health_checks.value <= answer_health_after:
                    send(client, request_id, b"reply", pack({"success": True, "error": None}))
            else:
                send(client, request_id, b"reply", pack({"success": True, "error": None, "cancelled": False}))
        for index, (client, request_id) in enumerate(runs):
            send(client, request_id, b"delta", pack({"trace": f"t{index}", "set": {"num_total_tokens": sent.value}}))
    for index, (client, request_id) in enumerate(runs):
        reply = {"success": True, "error": None, "head": {"id": f"e{index}"}, "traces": [{"id": f"t{index}", "nodes": 0, "calls": 0}]}
        send(client, request_id, b"reply", pack(reply))
    closing.wait()
    socket.close(linger=0)
    context.term()
