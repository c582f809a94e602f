"""The wire proxy's forwarding half: frames between drivers and one env server, in a
thread of its own, byte for byte and in order.

A ROUTER listens for drivers; each driver (a ROUTER identity) gets its own DEALER to
the upstream, so the env server sees one peer per driver exactly as without us, and a
driver's cancel rides behind its run on the same connection. Forwarding never waits
for anyone: a copy of each frame goes on a bounded deque for whoever watches, and
when that is full the copy is dropped and counted, never the frame. Our own requests
(a cancel the user asked for, health probes) go on a separate DEALER, so their
replies never reach a driver.
"""

from __future__ import annotations

import collections
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import zmq

from core.wire.protocol import KIND_REPLY, CancelRequest, HealthRequest, request_payload, unpack

COPY_CAPACITY = 100_000
"""Frames the watcher may fall behind by before copies are dropped."""

HEALTH_INTERVAL = 2.0
BATCH = 512
"""Frames taken from one socket before the others get a turn."""

TO_SERVER = "up"
TO_DRIVER = "down"


class ForwarderError(RuntimeError):
    """The proxy cannot run as asked (the listen address is taken, ...)."""


@dataclass(frozen=True)
class Copy:
    """One forwarded frame as the watcher sees it."""

    direction: str
    """TO_SERVER (a driver's request) or TO_DRIVER (the server's delta or reply)."""
    driver: bytes
    frames: list[bytes]
    """The frames after the driver's identity: [request_id, method|kind, payload]."""
    t: float


class Forwarder:
    def __init__(
        self, listen: str, upstream: str, capacity: int = COPY_CAPACITY, health_interval: float | None = HEALTH_INTERVAL
    ) -> None:
        self.listen = listen
        self.upstream = upstream
        self.capacity = capacity
        self.health_interval = health_interval
        """How often the upstream is asked for health (None: never; its frames would
        be the only ones the upstream sees that no driver sent)."""
        self.copies: collections.deque[Copy] = collections.deque()
        self.dropped = 0
        """Copies the watcher never saw (its queue was full); the frames went on."""
        self.forwarded = 0
        self.drivers = 0
        self.upstream_ok: bool | None = None
        """The last health probe's answer: None before the first answer or miss."""
        self.upstream_note = "not probed yet"
        self._commands: collections.deque[tuple[str, str]] = collections.deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._context: zmq.Context[zmq.Socket[bytes]] | None = None
        self._front: zmq.Socket[bytes] | None = None

    def start(self) -> None:
        """Bind the listen address here, so a taken one is an error to the caller,
        then forward on a thread until `stop`."""
        context = zmq.Context[zmq.Socket[bytes]]()
        front = context.socket(zmq.ROUTER)
        for option in (zmq.LINGER, zmq.SNDHWM, zmq.RCVHWM):
            front.setsockopt(option, 0)
        try:
            front.bind(self.listen)
        except zmq.ZMQError as error:
            front.close()
            context.term()
            if error.errno == zmq.EADDRINUSE:
                raise ForwarderError(f"cannot listen on {self.listen}: the address is in use (another proxy or server listens there)") from None
            raise ForwarderError(f"cannot listen on {self.listen}: {error}") from None
        self.listen = front.getsockopt_string(zmq.LAST_ENDPOINT)
        self._context, self._front = context, front
        self._thread = threading.Thread(target=self._loop, name=f"proxy {self.listen}", daemon=True)
        self._thread.start()

    def cancel(self, request_id: str) -> None:
        """Ask the server to abort a run (a real `cancel`; the driver gets verifiers'
        aborted reply)."""
        self._commands.append(("cancel", request_id))

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def take(self, limit: int) -> list[Copy]:
        """Up to `limit` copies, oldest first (the watcher's side)."""
        taken = []
        popleft = self.copies.popleft
        try:
            for _ in range(limit):
                taken.append(popleft())
        except IndexError:
            pass
        return taken

    # -- the forwarding thread ---------------------------------------------------

    def _loop(self) -> None:
        context, front = self._context, self._front
        assert context is not None and front is not None
        poller = zmq.Poller()
        poller.register(front, zmq.POLLIN)
        control = self._dealer(context)
        poller.register(control, zmq.POLLIN)
        backends: dict[bytes, zmq.Socket[bytes]] = {}
        drivers: dict[zmq.Socket[bytes], bytes] = {}
        probe: tuple[str, float] | None = None
        next_probe = 0.0
        try:
            while not self._stop.is_set():
                for sock, _ in poller.poll(50):
                    if sock is front:
                        self._from_drivers(front, backends, drivers, poller, context)
                    elif sock is control:
                        probe = self._control_reply(control, probe)
                    else:
                        self._from_server(sock, drivers[sock], front)
                self._tick()
                while self._commands:
                    _, request_id = self._commands.popleft()
                    control.send_multipart(
                        [uuid.uuid4().hex.encode(), CancelRequest.method.encode(), request_payload(CancelRequest(request_id=request_id))]
                    )
                interval = self.health_interval
                if interval is None:
                    continue
                now = time.monotonic()
                if probe is not None and now - probe[1] > interval:
                    self._upstream(False, "no answer to health (down, starting, or not an env server); retrying")
                    probe = None
                if probe is None and now >= next_probe:
                    probe_id = uuid.uuid4().hex
                    control.send_multipart([probe_id.encode(), HealthRequest.method.encode(), request_payload(HealthRequest())])
                    probe, next_probe = (probe_id, now), now + interval
        finally:
            for sock in (*backends.values(), control, front):
                sock.close(linger=0)
            context.term()

    def _tick(self) -> None:
        """Once per turn of the forwarding loop (a subclass reports its counters)."""

    def _dealer(self, context: zmq.Context[zmq.Socket[bytes]]) -> zmq.Socket[bytes]:
        dealer = context.socket(zmq.DEALER)
        for option in (zmq.LINGER, zmq.SNDHWM, zmq.RCVHWM):
            dealer.setsockopt(option, 0)
        dealer.connect(self.upstream)
        return dealer

    def _from_drivers(self, front: zmq.Socket[bytes], backends: dict[bytes, zmq.Socket[bytes]], drivers: dict[zmq.Socket[bytes], bytes], poller: zmq.Poller, context: zmq.Context[zmq.Socket[bytes]]) -> None:
        for _ in range(BATCH):
            try:
                frames = front.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            driver, rest = frames[0], frames[1:]
            backend = backends.get(driver)
            if backend is None:
                backend = backends[driver] = self._dealer(context)
                drivers[backend] = driver
                poller.register(backend, zmq.POLLIN)
                self.drivers = len(backends)
            backend.send_multipart(rest)
            self._copy(TO_SERVER, driver, rest)

    def _from_server(self, backend: zmq.Socket[bytes], driver: bytes, front: zmq.Socket[bytes]) -> None:
        for _ in range(BATCH):
            try:
                frames = backend.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                front.send_multipart([driver, *frames])
            except zmq.ZMQError:
                pass  # the driver went away; a ROUTER drops what it cannot route, as the server's would
            self._copy(TO_DRIVER, driver, frames)

    def _copy(self, direction: str, driver: bytes, frames: list[bytes]) -> None:
        self.forwarded += 1
        if len(self.copies) < self.capacity:
            self.copies.append(Copy(direction, driver, frames, time.time()))
        else:
            self.dropped += 1

    def _control_reply(self, control: zmq.Socket[bytes], probe: tuple[str, float] | None) -> tuple[str, float] | None:
        frames = control.recv_multipart()
        if probe is None or not frames or frames[0] != probe[0].encode():
            return probe  # a cancel's answer, or a probe we already gave up on
        if len(frames) != 3 or frames[1] != KIND_REPLY:
            self._upstream(False, f"the upstream answered health with {len(frames)} frames, not an env server's reply")
            return None
        try:
            reply = unpack(frames[2])
            ok = isinstance(reply, dict) and reply.get("success", False) is True
        except Exception:
            ok = False
        self._upstream(ok, "healthy" if ok else "the upstream's health reply is not an env server's")
        return None

    def _upstream(self, ok: bool, note: str) -> None:
        self.upstream_ok, self.upstream_note = ok, note


def probe_upstream(address: str, timeout: float = 2.0) -> str | None:
    """Why `address` is certainly not an env server (something listens there but does
    not speak ZMQ), else None; down or slow is not certain, the proxy keeps trying."""
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except (OSError, ValueError):
        return None  # down or unreachable: the proxy keeps trying
    greeting = b""
    with conn:
        conn.settimeout(timeout)
        try:
            while len(greeting) < 10 and (chunk := conn.recv(10 - len(greeting))):
                greeting += chunk
        except TimeoutError:
            return f"{address} accepts connections but sent no ZMQ greeting within {timeout:g}s: it is not an env server (is it the model endpoint?)"
        except OSError:
            return None
    if len(greeting) == 10 and greeting[0] == 0xFF and greeting[9] == 0x7F:
        return None
    return f"{address} answered {greeting[:10]!r}, not a ZMQ greeting: it is not an env server"


def counters_line(forwarder: Any) -> str:
    """The proxy's counters in one line, for a card or a log."""
    return f"{forwarder.forwarded:,} frames forwarded · {forwarder.drivers} driver(s) · {forwarder.dropped:,} view copies dropped"


def check_proxy_addresses(listen: str, upstream: str) -> None:
    """Refuse at once what can never work: a listen address another program holds,
    or an upstream that is certainly not an env server. A down upstream is fine."""
    host, _, port = listen.removeprefix("tcp://").rpartition(":")
    with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), int(port)))
        except OSError as error:
            raise ForwarderError(f"cannot listen on {listen}: {error.strerror or error} (is another proxy or server listening there?)") from None
    if (why := probe_upstream(upstream)) is not None:
        raise ForwarderError(f"upstream {why}")
