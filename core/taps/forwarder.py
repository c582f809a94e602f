"""The wire proxy's forwarding half: the bytes between drivers and one env server, in
a thread of its own, unchanged and in order.

Each driver's TCP connection gets its own connection to the upstream and the bytes are
relayed as they come, ZMQ handshake included, so the env server sees each driver
exactly as without us (its own peer, its own identity), and a burst of frames costs one
receive and one send rather than Python steps per frame. The relay never waits for
anyone: the messages are read out of a copy of the bytes after they went on (`zmtp`),
for whoever watches, into a bounded queue; when that is full the copy is dropped and
counted, never the bytes. Our own requests (a cancel the user asked for, health
probes) go on a separate DEALER, so their replies never reach a driver.

A forwarder that replaces one that died answers the runs that were in flight through
it: a driver that reconnects is told, on each such request id, that its run failed,
or verifiers' client (which has no timeout) would wait for that reply forever. Which
new connection is which old driver cannot be known (a DEALER's reconnect carries no
name), so every connection gets every such reply; a client drops replies to ids it
never sent, and the ids are random.
"""

from __future__ import annotations

import collections
import errno
import resource
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import zmq

from tracewatch.core.errors import TracewatchError
from tracewatch.core.taps.zmtp import ZmtpStream, encode_message
from tracewatch.core.wire.protocol import KIND_REPLY, CancelRequest, HealthRequest, pack, request_payload, unpack

COPY_CAPACITY = 100_000
"""Messages the watcher may fall behind by before copies are dropped."""

HEALTH_INTERVAL = 2.0
CHUNK = 65536
"""The most bytes relayed per receive."""
RELAY_TURNS = 16
"""Turns of relaying, while bytes keep coming, before the watcher's copies are read."""
ACCEPT_BACKOFF = (0.05, 2.0)
"""Out of file descriptors, new connections wait this long (doubling) before the next
try, rather than the listener waking the loop at once, forever."""
ORPHAN_SECONDS = 30.0
"""How long the runs a dead forwarder left are answered to drivers that connect (a
driver reconnects within a tenth of a second of the new listener)."""

TO_SERVER = "up"
TO_DRIVER = "down"
DRIVER_LEFT = "driver"
SERVER_LEFT = "server"


class ForwarderError(TracewatchError, RuntimeError):
    """The proxy cannot run as asked (the listen address is taken, ...)."""


@dataclass(frozen=True)
class Copy:
    """One forwarded message as the watcher sees it."""

    direction: str
    """TO_SERVER (a driver's request) or TO_DRIVER (the server's delta or reply)."""
    driver: bytes
    """The driver's connection (one per driver, a new one if it reconnects)."""
    frames: list[bytes]
    """The message's frames: [request_id, method|kind, payload]."""
    t: float
    lost: tuple[bytes | None, ...] | None = None
    """Copies of this direction of this connection were lost just before this one:
    their first frames (a run's request id; None where not known). A copy with no
    `frames` is only this news (and `ended`)."""
    ended: tuple[bytes, ...] = ()
    """Runs whose reply was lost to the view (they ended at their driver)."""
    closed: str | None = None
    """The connection closed, after every copy of it: DRIVER_LEFT or SERVER_LEFT
    (who went first). A copy with this has no `frames`."""


@dataclass(eq=False)
class Leg:
    """One direction of a driver's link: bytes read from `source` go on to `target`."""

    direction: str
    driver: bytes
    source: socket.socket
    target: socket.socket
    stream: ZmtpStream
    unsent: bytes = b""
    """Bytes the target could not take yet; the source is not read until they went."""
    gap: bool = False
    """Copies of this leg were dropped: the view picks up again at a message start."""
    resume: bool = False
    """Copies were dropped since the view last heard: with the next copies, or on
    their own once the view has room, it is told to read on from a message start,
    with `lost`, `kept` and `ended`."""
    lost: list[bytes | None] = field(default_factory=list)
    """The first frames (request ids) of the messages dropped, not yet told."""
    kept: bytearray = field(default_factory=bytearray)
    """Whole replies from dropped copies, for the view before anything after them."""
    ended: list[bytes] = field(default_factory=list)
    """Runs whose reply was dropped and could not be kept, not yet told."""
    pending: bytearray = field(default_factory=bytearray)
    """Copies gathered for the watcher, not yet handed over."""
    firsts: list[bytes | None] = field(default_factory=list)
    """The first frames of the messages that begin in `pending`."""
    inside: bool = False
    """`pending` begins inside a message (begun in copies already handed over)."""
    offsets: list[int] = field(default_factory=list)
    """Where in `pending` each of those messages begins."""
    skipping: bool = False
    """A message of a run that lost copies is being shed to its end."""
    sibling: Leg | None = field(default=None, repr=False)
    """The other direction of the same link."""


@dataclass(eq=False)
class Link:
    driver: bytes
    client: socket.socket
    server: socket.socket
    legs: list[Leg] = field(default_factory=list)
    connected: bool = False
    closed: bool = False
    driver_left: bool = False
    """The driver's side went first (it closed, or was killed): not the server's."""
    owed: bytes = b""
    """Failure replies to put on the driver's side at the next message boundary."""


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
        """Messages relayed, both ways."""
        self.drivers = 0
        """Driver connections open now."""
        self.upstream_ok: bool | None = None
        """The last health probe's answer: None before the first answer or miss."""
        self.upstream_note = "not probed yet"
        self._commands: collections.deque[tuple[str, str]] = collections.deque()
        self._failing: collections.deque[bytes] = collections.deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._next_driver = 0
        self._relayed: list[tuple[Leg, bytes]] = []
        """What went on this turn, for the watcher once nothing else waits to go on."""
        self._ended: list[Link] = []
        self._orphans: list[tuple[bytes, float]] = []
        """Failure replies (ZMTP bytes) owed to every driver, until when."""
        self._owing: set[Link] = set()
        self._open: set[Link] = set()
        self._poller: zmq.Poller | None = None
        self.notes: collections.deque[str] = collections.deque(maxlen=100)
        """What the forwarder has to say beyond its counters (for the logs)."""
        self._accept_at: float | None = None
        """When accepting resumes, while it is paused (out of descriptors)."""
        self._backoff = ACCEPT_BACKOFF[0]

    def start(self) -> None:
        """Bind the listen address here, so a taken one is an error to the caller,
        then forward on a thread until `stop`."""
        host, port = host_port(self.listen)
        listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host, port))
            listener.listen(128)
        except OSError as error:
            listener.close()
            if error.errno == errno.EADDRINUSE:
                raise ForwarderError(f"cannot listen on {self.listen}: the address is in use (another proxy or server listens there)") from None
            raise ForwarderError(f"cannot listen on {self.listen}: {error.strerror or error}") from None
        listener.setblocking(False)
        bound = listener.getsockname()[1]
        self.listen = f"tcp://[{host}]:{bound}" if ":" in host else f"tcp://{host}:{bound}"
        self._listener = listener
        self._thread = threading.Thread(target=self._loop, name=f"proxy {self.listen}", daemon=True)
        self._thread.start()

    def cancel(self, request_id: str) -> None:
        """Ask the server to abort a run (a real `cancel`; the driver gets verifiers'
        aborted reply)."""
        self._commands.append(("cancel", request_id))

    def fail(self, request_id: bytes, error: str) -> None:
        """Answer `request_id`, on every driver's connection, with a failed run's reply."""
        self._failing.append(encode_message([request_id, KIND_REPLY, pack({"success": False, "error": error})]))

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
        listener = self._listener
        assert listener is not None
        context = zmq.Context[zmq.Socket[bytes]]()
        poller = self._poller = zmq.Poller()
        poller.register(listener, zmq.POLLIN)
        control = self._dealer(context)
        poller.register(control, zmq.POLLIN)
        links: dict[int, Link] = {}
        """By file descriptor (what the poller answers with); a closed socket's is
        let go only after the turn, so none is reused while its events are read."""
        closing: list[socket.socket] = []
        probe: tuple[str, float] | None = None
        next_probe = 0.0
        try:
            while not self._stop.is_set():
                if self._accept_at is not None and time.monotonic() >= self._accept_at:
                    self._accept_at = None
                    poller.register(listener, zmq.POLLIN)
                ready = poller.poll(self._poll_ms())
                for _ in range(RELAY_TURNS):  # what came meanwhile goes on before any copy is read
                    for item, events in ready:
                        if item is control:
                            probe = self._control_reply(control, probe)
                        elif item == listener.fileno():
                            self._accept(listener, links, poller, closing)
                        elif (link := links.get(item)) is not None:
                            sock = link.client if item == link.client.fileno() else link.server
                            self._serve(link, sock, events, links, poller, closing)
                    for sock in closing:
                        sock.close()
                    closing.clear()
                    if not (ready := poller.poll(0)):
                        break
                self._hand_over(control)
                if self.health_interval is not None:
                    probe, next_probe = self._probe_health(control, probe, next_probe, self.health_interval)
        finally:
            for link in set(links.values()):
                self._close(link, links, poller, closing)
            for sock in (*closing, listener):
                sock.close()
            control.close(linger=0)
            context.term()

    def _hand_over(self, control: zmq.Socket[bytes]) -> None:
        """After the relay turns: what was relayed and which links ended go to the
        watcher, and the cancels asked for meanwhile go upstream."""
        for leg, data in self._relayed:
            self._copy(leg, data)
        self._relayed.clear()
        for link in self._ended:
            self._closed(link)
        self._ended.clear()
        self._tick()
        while self._commands:
            _, request_id = self._commands.popleft()
            control.send_multipart(
                [uuid.uuid4().hex.encode(), CancelRequest.method.encode(), request_payload(CancelRequest(request_id=request_id))]
            )
        while self._failing:
            reply = self._failing.popleft()
            self._orphans.append((reply, time.monotonic() + ORPHAN_SECONDS))
            for link in self._open:
                link.owed += reply
                self._owing.add(link)
        if self._owing:
            self._pay()

    def _pay(self) -> None:
        """Put the failure replies owed on each driver's side once that side rests
        between messages, all of it relayed so far having gone on, and the driver
        has sent its own READY: a message that reaches libzmq before it sent its
        READY is a protocol error, so the driver dropped the connection, reconnected
        and was owed the replies again (under load, until they were no longer owed,
        and its runs waited for ever)."""
        for link in list(self._owing):
            leg = link.legs[1]
            if not leg.unsent and leg.stream.between_messages and link.legs[0].stream.commanded:
                owed, link.owed = link.owed, b""
                self._owing.discard(link)
                try:
                    leg.unsent = owed[leg.target.send(owed) :]
                except (BlockingIOError, InterruptedError):
                    leg.unsent = owed
                except OSError:
                    continue  # the driver went; its link closes when next read
                assert self._poller is not None
                self._interest(link, self._poller)

    def _probe_health(
        self, control: zmq.Socket[bytes], probe: tuple[str, float] | None, next_probe: float, interval: float
    ) -> tuple[tuple[str, float] | None, float]:
        """Ask the upstream for health every `interval`; a probe unanswered for longer
        says it is down. Returns the probe in flight (its id and when it was sent) and
        when the next one is due."""
        now = time.monotonic()
        if probe is not None and now - probe[1] > interval:
            self._upstream(False, "no answer to health (down, starting, or not an env server); retrying")
            probe = None
        if probe is None and now >= next_probe:
            probe_id = uuid.uuid4().hex
            control.send_multipart([probe_id.encode(), HealthRequest.method.encode(), request_payload(HealthRequest())])
            return (probe_id, now), now + interval
        return probe, next_probe

    def _tick(self) -> None:
        """Once per turn of the forwarding loop (a subclass reports its counters)."""

    def _poll_ms(self) -> int:
        """The longest the loop waits for bytes (a subclass with work due sooner says)."""
        return 50

    def _stream(self) -> ZmtpStream:
        """How a leg's bytes are read for the watcher: here, into whole messages."""
        return ZmtpStream(keep=True)

    def _dealer(self, context: zmq.Context[zmq.Socket[bytes]]) -> zmq.Socket[bytes]:
        dealer = context.socket(zmq.DEALER)
        for option in (zmq.LINGER, zmq.SNDHWM, zmq.RCVHWM):
            dealer.setsockopt(option, 0)
        dealer.connect(self.upstream)
        return dealer

    def _accept(self, listener: socket.socket, links: dict[int, Link], poller: zmq.Poller, closing: list[socket.socket]) -> None:
        """A driver connects: connect to the upstream for it; its bytes are read once
        that connection is up (if the upstream is down, the driver is let go and
        retries, as it would against a server that is down)."""
        while True:
            try:
                client, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                if error.errno in (errno.EMFILE, errno.ENFILE):
                    self._pause_accepting(listener, poller)
                return  # else the driver gave up at once: it retries
            host, port = host_port(self.upstream)
            try:
                family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
                server = socket.socket(family, kind, proto)
            except OSError as error:
                client.close()
                if error.errno in (errno.EMFILE, errno.ENFILE):
                    self._pause_accepting(listener, poller)
                    return
                continue
            if self._backoff > ACCEPT_BACKOFF[0]:
                self._backoff = ACCEPT_BACKOFF[0]
                self.notes.append(f"accepting connections again ({self.drivers + 1} open)")
            for sock in (client, server):
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._next_driver += 1
            driver = str(self._next_driver).encode()
            link = Link(driver, client, server)
            link.legs = [
                Leg(TO_SERVER, driver, client, server, self._stream()),
                Leg(TO_DRIVER, driver, server, client, self._stream()),
            ]
            link.legs[0].sibling, link.legs[1].sibling = link.legs[1], link.legs[0]
            links[client.fileno()] = links[server.fileno()] = link
            self._open.add(link)
            self.drivers += 1
            now = time.monotonic()
            self._orphans = [(reply, until) for reply, until in self._orphans if until > now]
            if self._orphans:
                link.owed = b"".join(reply for reply, _ in self._orphans)
                self._owing.add(link)
            if server.connect_ex(address) not in (0, errno.EINPROGRESS):
                self._close(link, links, poller, closing)
                continue
            poller.register(server, zmq.POLLOUT)

    def _pause_accepting(self, listener: socket.socket, poller: zmq.Poller) -> None:
        """Out of file descriptors: the connections open are served, new ones wait in
        the listen queue (the kernel's) until a back-off has passed."""
        if self._backoff == ACCEPT_BACKOFF[0]:
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            self.notes.append(
                f"out of file descriptors (limit {limit}) with {self.drivers} connection(s) open: new connections wait, "
                f"retried with a back-off up to {ACCEPT_BACKOFF[1]:g}s; those open are served"
            )
        poller.register(listener, 0)
        self._accept_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, ACCEPT_BACKOFF[1])

    def _serve(
        self, link: Link, sock: socket.socket, events: int, links: dict[int, Link], poller: zmq.Poller, closing: list[socket.socket]
    ) -> None:
        if not link.connected:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self._close(link, links, poller, closing)
                return
            link.connected = True
            self._interest(link, poller)
            return
        try:
            if events & zmq.POLLOUT:
                for leg in link.legs:
                    if leg.target is sock and leg.unsent:
                        leg.unsent = leg.unsent[sock.send(leg.unsent) :]
            if events & (zmq.POLLIN | zmq.POLLERR):
                for leg in link.legs:
                    if leg.source is sock and not leg.unsent:
                        self._relay(leg, link, links, poller, closing)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # from `sock`: _relay answers for the other side itself
            self._close(link, links, poller, closing, gone=sock)
            return
        if not link.closed:
            self._interest(link, poller)

    def _relay(self, leg: Leg, link: Link, links: dict[int, Link], poller: zmq.Poller, closing: list[socket.socket]) -> None:
        data = leg.source.recv(CHUNK)
        if not data:
            self._close(link, links, poller, closing, gone=leg.source)
            return
        try:
            sent = leg.target.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._relayed.append((leg, data))  # what came before the other side went is still a copy
            self._close(link, links, poller, closing, gone=leg.target)
            return
        if sent < len(data):
            leg.unsent = data[sent:]
        self._relayed.append((leg, data))

    def _interest(self, link: Link, poller: zmq.Poller) -> None:
        """Read a side only while what it sent before has gone on (TCP's own back
        pressure then reaches the sender); watch for room where bytes wait."""
        for sock in (link.client, link.server):
            flags = 0
            for leg in link.legs:
                if leg.source is sock and not leg.unsent:
                    flags |= zmq.POLLIN
                if leg.target is sock and leg.unsent:
                    flags |= zmq.POLLOUT
            poller.register(sock, flags)

    def _close(
        self, link: Link, links: dict[int, Link], poller: zmq.Poller, closing: list[socket.socket], gone: socket.socket | None = None
    ) -> None:
        """Either side went away (`gone`, where known): so does the other, as a direct
        connection would. A driver gone leaves the server nobody to answer: verifiers'
        server sends its run's deltas and reply to a peer it no longer has."""
        if link.closed:
            return
        link.closed = True
        link.driver_left = gone is link.client
        self._open.discard(link)
        self._owing.discard(link)
        for sock in (link.client, link.server):
            links.pop(sock.fileno(), None)
            poller.register(sock, 0)  # unregisters it, if it was
            closing.append(sock)
        self.drivers -= 1
        self._ended.append(link)

    def _closed(self, link: Link) -> None:
        """A driver's link ended (a subclass tells its watcher)."""

    def _copy(self, leg: Leg, data: bytes) -> None:
        for message in leg.stream.feed(data):
            self.forwarded += 1
            if len(self.copies) < self.capacity:
                self.copies.append(Copy(leg.direction, leg.driver, message, time.time()))
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


def host_port(address: str) -> tuple[str, int]:
    """`tcp://HOST:PORT` as a socket address (`*` is every interface, as for ZMQ)."""
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    host = host.strip("[]")
    return ("0.0.0.0" if host == "*" else host), int(port)


def probe_upstream(address: str, timeout: float = 2.0) -> str | None:
    """Why `address` is certainly not an env server (something listens there but does
    not speak ZMQ), else None; down or slow is not certain, the proxy keeps trying."""
    try:
        conn = socket.create_connection(host_port(address), timeout=timeout)
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
    host, port = host_port(listen)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise ForwarderError(f"cannot listen on {listen}: {error.strerror or error} (is another proxy or server listening there?)") from None
    if (why := probe_upstream(upstream)) is not None:
        raise ForwarderError(f"upstream {why}")


def raise_descriptor_limit() -> None:
    """Each driver costs two descriptors (its connection and ours upstream): take the
    soft limit up to the hard one, as far as the kernel lets a process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for target in (hard, 1 << 20):
        if soft >= target != resource.RLIM_INFINITY:
            return
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return
        except (ValueError, OSError):
            continue
