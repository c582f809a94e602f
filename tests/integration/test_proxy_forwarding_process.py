"""The proxy relays bytes, in a process of its own (the form the app runs): several
drivers at once pass byte for byte both ways, health and cancel included, and the
server sees each driver as itself; an upstream that goes away and comes back is
reached again; a view that never reads costs the drivers nothing and what it misses is
counted, never garbled; and the ZMTP reading behind the view holds for any split of
the bytes."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys

import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.polling import wait_until
from tests.support.tether import TetheredProcess
from tracewatch.core.taps.forward_process import ForwardingProcess
from tracewatch.core.taps.forwarder import DRIVER_LEFT, SERVER_LEFT, TO_DRIVER, TO_SERVER, Copy, Forwarder
from tracewatch.core.taps.zmtp import ZmtpStream
from tracewatch.core.wire.protocol import pack

WAIT = 60.0


@pytest.fixture
def context():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture
def forwarding():
    started: list[ForwardingProcess] = []

    def start(upstream: str, **options) -> ForwardingProcess:
        process = ForwardingProcess("tcp://127.0.0.1:0", upstream, **options)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()
        process.close()


def router(context: zmq.Context, address: str = "tcp://127.0.0.1:0") -> tuple[zmq.Socket, str]:
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(address)
    return sock, sock.getsockopt_string(zmq.LAST_ENDPOINT)


def driver(context: zmq.Context, address: str, identity: bytes) -> zmq.Socket:
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTING_ID, identity)
    sock.connect(address)
    return sock


def receive(sock: zmq.Socket, count: int, what: str) -> list[list[bytes]]:
    got: list[list[bytes]] = []

    def more() -> bool:
        while len(got) < count and sock.poll(0):
            got.append(sock.recv_multipart())
        return len(got) == count

    wait_until(more, WAIT, what)
    return got


def requests(server: zmq.Socket, peer: bytes, count: int, what: str) -> list[list[bytes]]:
    """What `peer` sent the server; the proxy's health probes (its own connection)
    are answered as an env server would, those waiting now even when `count` is 0 (a
    probe may come after the peer's request, and only an answer makes it healthy)."""
    got: list[list[bytes]] = []

    def more() -> bool:
        while len(got) < max(count, 1) and server.poll(0):
            sender, *frames = server.recv_multipart()
            if sender == peer:
                got.append(frames)
            elif frames[1:2] == [b"health"]:
                server.send_multipart([sender, frames[0], b"reply", pack({"success": True})])
        return len(got) == count

    wait_until(more, WAIT, what)
    return got


def read_all(process: ForwardingProcess, expected: int) -> list[Copy]:
    """The view's copies of messages (not the news of a drop) once the counters say
    every message went by (each one seen or counted as dropped)."""
    copies: list[Copy] = []
    wait_until(
        lambda: copies.extend(copy for copy in process.take(10_000) if copy.frames) or (process.forwarded == expected and len(copies) + process.dropped == expected),
        WAIT,
        f"the view accounting for {expected} messages",
    )
    return copies


REQUESTS = [
    [b"r1", b"health", pack({})],
    [b"r2", b"run", pack({"task_data": {"id": "t"}, "model": "m", "sampling": {}})],
    [b"r3", b"cancel", pack({"request_id": "r2"})],
    [b"", b"", b""],
    [b"r4", b"run", b"\x00" * 300],
    [b"r5", b"run", bytes(range(256)) * 800],
]


def test_several_drivers_pass_byte_for_byte_both_ways_and_the_view_reads_every_message(context, forwarding) -> None:
    server, upstream = router(context)
    process = forwarding(upstream)
    drivers = {f"driver-{i}".encode(): driver(context, process.listen, f"driver-{i}".encode()) for i in range(3)}
    for identity, sock in drivers.items():
        for request in REQUESTS:
            sock.send_multipart([*request[:2], request[2] + identity])
    received: dict[bytes, list[list[bytes]]] = {}

    def serve() -> bool:
        while server.poll(0):
            peer, *frames = server.recv_multipart()
            if peer not in drivers:
                continue  # the proxy's own health probe, on its own connection
            received.setdefault(peer, []).append(frames)
            server.send_multipart([peer, frames[0], b"delta", frames[2][::-1]])
            server.send_multipart([peer, frames[0], b"reply", frames[1]])
        return sum(map(len, received.values())) == len(drivers) * len(REQUESTS)

    wait_until(serve, WAIT, "every request at the server")
    sent = {identity: [[*r[:2], r[2] + identity] for r in REQUESTS] for identity in drivers}
    assert received == sent, "the server sees each driver by its own identity, its messages unchanged and in order"
    replies = {identity: [m for r in sent[identity] for m in ([r[0], b"delta", r[2][::-1]], [r[0], b"reply", r[1]])] for identity in drivers}
    for identity, sock in drivers.items():
        assert receive(sock, len(replies[identity]), "every reply at its driver") == replies[identity]
    copies = read_all(process, len(drivers) * len(REQUESTS) * 3)
    assert process.dropped == 0
    seen: dict[bytes, dict[str, list[list[bytes]]]] = {}
    for copy in copies:
        seen.setdefault(copy.driver, {TO_SERVER: [], TO_DRIVER: []})[copy.direction].append(copy.frames)
    assert sorted((s[TO_SERVER], s[TO_DRIVER]) for s in seen.values()) == sorted((sent[i], replies[i]) for i in drivers)


def test_an_upstream_that_goes_away_and_comes_back_is_reached_again(context, forwarding) -> None:
    server, upstream = router(context)
    process = forwarding(upstream)
    sock = driver(context, process.listen, b"d")
    sock.send_multipart([b"1", b"run", b"before"])
    assert requests(server, b"d", 1, "the first request") == [[b"1", b"run", b"before"]]
    wait_until(lambda: requests(server, b"d", 0, "") == [] and process.take(100) is not None and process.upstream_ok, WAIT, "the upstream seen healthy")
    server.close()
    wait_until(lambda: process.take(100) is not None and process.upstream_ok is False, WAIT, "the proxy seeing the upstream down")
    sock.send_multipart([b"2", b"run", b"while down"])
    assert not sock.poll(300), "no answer while the upstream is down"
    server, _ = router(context, upstream)
    assert requests(server, b"d", 1, "the request sent while down, once the upstream is back") == [[b"2", b"run", b"while down"]]
    server.send_multipart([b"d", b"2", b"reply", b"ok"])
    assert receive(sock, 1, "the answer") == [[b"2", b"reply", b"ok"]]


def test_a_view_that_never_reads_costs_the_drivers_nothing_and_what_it_missed_is_counted(context, forwarding) -> None:
    server, upstream = router(context)
    process = forwarding(upstream, copy_bytes=2 * 65536)
    sock = driver(context, process.listen, b"d")
    deltas = 400
    sock.send_multipart([b"r", b"run", b"go"])
    requests(server, b"d", 1, "the run request")
    for i in range(deltas):
        server.send_multipart([b"d", b"r", b"delta", i.to_bytes(4, "big") * 25_000])
    server.send_multipart([b"d", b"r", b"reply", b"done"])
    sent = [[b"r", b"delta", i.to_bytes(4, "big") * 25_000] for i in range(deltas)] + [[b"r", b"reply", b"done"]]
    assert receive(sock, len(sent), "every frame at the driver, the view never reading") == sent
    copies = read_all(process, 1 + len(sent))
    assert process.dropped > 0
    down = [copy.frames for copy in copies if copy.direction == TO_DRIVER]
    positions = [sent.index(frames) for frames in down]  # each copy the view got is whole and unchanged
    assert positions == sorted(set(positions)), "in order, none twice"


def test_replies_dropped_for_a_view_that_never_read_reach_it_whole_once_it_reads_though_no_more_copies_come(context, forwarding) -> None:
    """A view that read nothing while its runs burst far past the copy bound and
    ended, their replies long (past half the bound together): once it reads, with
    nothing more from anyone, it is told which runs lost copies and gets every reply
    whole (the news first), so it can end them. Before, replies dropped with the
    copies around them were gone and the news waited for copies that never came;
    then, replies kept past half the bound waited for room they never had."""
    server, upstream = router(context)
    process = forwarding(upstream, copy_bytes=2 * 65536)
    sock = driver(context, process.listen, b"d")
    runs = [b"r1", b"r2"]
    for run in runs:
        sock.send_multipart([run, b"run", b"go"])
    requests(server, b"d", len(runs), "the run requests")
    sent = []
    for run in runs:
        sent += [[run, b"delta", bytes([i]) * 500_000] for i in range(4)] + [[run, b"reply", run * 30_000]]
    for frames in sent:
        server.send_multipart([b"d", *frames])
    assert receive(sock, len(sent), "every frame at the driver, the view never reading") == sent
    copies: list[Copy] = []

    def replied() -> bool:
        copies.extend(process.take(1000))
        return {copy.frames[0] for copy in copies if copy.frames[1:2] == [b"reply"]} == set(runs)

    wait_until(replied, WAIT, lambda: f"both replies in the view (it got {[(c.frames[:2], c.lost) for c in copies][-8:]})")
    down = [copy for copy in copies if copy.direction == TO_DRIVER]
    replies = [copy.frames for copy in down if copy.frames[1:2] == [b"reply"]]
    assert replies == [frames for frames in sent if frames[1] == b"reply"], "each reply whole, once"
    for run in runs:
        reply_at = next(at for at, copy in enumerate(down) if copy.frames == [run, b"reply", run * 30_000])
        assert any(run in (copy.lost or ()) for copy in down[:reply_at]), f"{run!r} named as having lost copies before its reply"


def test_a_closed_connection_is_told_after_its_copies_with_the_side_that_went_first(context, forwarding) -> None:
    """The view ends a connection's runs with no reply when it closes, saying who left
    (`ProxyVariant`): a driver that closed (or was killed) first, or the server. The news
    comes after every copy of that connection, so a reply the proxy saw still ends its
    run as it ended; another driver's connection is not touched."""
    server, upstream = router(context)
    process = forwarding(upstream)
    leaving, staying = driver(context, process.listen, b"a"), driver(context, process.listen, b"b")
    leaving.send_multipart([b"1", b"run", b"a"])
    requests(server, b"a", 1, "the leaving driver's request")
    staying.send_multipart([b"2", b"run", b"b"])
    requests(server, b"b", 1, "the staying driver's request")
    server.send_multipart([b"a", b"1", b"reply", b"ok"])
    receive(leaving, 1, "the reply at the leaving driver")
    leaving.close()
    copies: list[Copy] = []

    def told(side: str) -> bool:
        copies.extend(process.take(100))
        return any(copy.closed == side for copy in copies)

    def both_requests() -> bool:
        return {tuple(copy.frames[:1]) for copy in copies if copy.direction == TO_SERVER} >= {(b"1",), (b"2",)}

    # the other connection's copies may still be gathering when this one is told closed
    wait_until(lambda: told(DRIVER_LEFT) and both_requests(), WAIT, lambda: f"the driver's leaving told (the view got {[(c.driver, c.frames[:2], c.closed) for c in copies]})")
    connection = {tuple(copy.frames[:1]): copy.driver for copy in copies if copy.direction == TO_SERVER}
    news = [(copy.driver, copy.frames[:2], copy.closed) for copy in copies if copy.driver == connection[(b"1",)]]
    assert news[-2:] == [(connection[(b"1",)], [b"1", b"reply"], None), (connection[(b"1",)], [], DRIVER_LEFT)], news
    assert not any(copy.closed for copy in copies if copy.driver == connection[(b"2",)]), "the other connection goes on"
    server.close()
    wait_until(lambda: told(SERVER_LEFT), WAIT, lambda: f"the server's leaving told (the view got {[(c.driver, c.closed) for c in copies]})")
    assert {copy.driver: copy.closed for copy in copies if copy.closed}[connection[(b"2",)]] == SERVER_LEFT


GREETING = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x01" + b"NULL".ljust(20, b"\0") + b"\0" + b"\0" * 31


def encode(frames: list[bytes], command: bool = False) -> bytes:
    """ZMTP 3 framing, from the spec (rfc.zeromq.org/spec/23)."""
    out = b""
    for i, body in enumerate(frames):
        flags = (4 if command else 0) | (1 if i < len(frames) - 1 else 0)
        out += bytes([flags | 2]) + len(body).to_bytes(8, "big") if len(body) > 255 else bytes([flags, len(body)])
        out += body
    return out


body = st.one_of(st.binary(max_size=40), st.binary(min_size=256, max_size=600))
messages = st.lists(st.lists(body, min_size=1, max_size=4), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(messages=messages, cuts=st.lists(st.integers(min_value=0), max_size=30), resume_after=st.integers(min_value=0))
def test_any_split_of_the_bytes_reads_the_same_messages_and_a_resume_reads_a_whole_tail(messages, cuts, resume_after) -> None:
    data = GREETING + encode([b"\x05READY"], command=True) + b"".join(encode(m) for m in messages)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in zip(points, points[1:], strict=False)]
    reader, scanner = ZmtpStream(keep=True), ZmtpStream(keep=False)
    assert [m for chunk in chunks for m in reader.feed(chunk)] == messages
    # as the forwarder gathers: what the scanner held back goes with the next chunk
    units: list[bytes] = []
    scans: list[tuple[int, int | None, int]] = []
    firsts: list[bytes | None] = []
    for chunk in chunks:
        held = scanner.held
        offsets: list[int] = []
        scans.append(scanner.scan(chunk, firsts, offsets))
        unit = held + chunk
        units.append(unit[: len(unit) - len(scanner.held)])
        assert [unit[at] & 4 for at in offsets] == [0] * len(offsets), "each message begins where it is said to"
    assert b"".join(units) == data and sum(starts for starts, _, _ in scans) == len(messages)
    short = [m[0] if len(m[0]) <= 255 else None for m in messages]
    assert [f if s is not None else None for f, s in zip(firsts, short, strict=True)] == short, "every short first frame (a run's request id) is known"
    # the view loses every unit up to one, then picks up where the forwarder says
    lost = resume_after % len(units)
    later = [(i, first, before) for i, (_, first, before) in enumerate(scans) if i > lost and first is not None]
    if not later:
        return
    i, first, before = later[0]
    missed = sum(starts for starts, _, _ in scans[:i]) + before
    resumed = ZmtpStream(keep=True)
    resumed.resume()
    tail = [m for unit in [units[i][first:], *units[i + 1 :]] for m in resumed.feed(unit)]
    assert tail == messages[missed:]


def test_a_connection_that_is_not_zmtp_is_relayed_and_named_unreadable(forwarding) -> None:
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen()
    upstream.setblocking(False)
    process = forwarding(f"tcp://127.0.0.1:{upstream.getsockname()[1]}")
    client = socket.create_connection(("127.0.0.1", int(process.listen.rsplit(":", 1)[1])))
    accepted: dict[socket.socket, bytes] = {}
    words = b"GET / HTTP/1.0\r\n" + b"x" * 100

    def relayed() -> bool:
        with contextlib.suppress(BlockingIOError):
            conn, _ = upstream.accept()
            conn.setblocking(False)
            accepted[conn] = b""
        for conn in accepted:
            with contextlib.suppress(BlockingIOError):
                accepted[conn] += conn.recv(4096)
        return words in accepted.values()  # the other connection is the proxy's health probe

    try:
        client.sendall(words)
        wait_until(relayed, WAIT, "the bytes at the upstream, unchanged")
        wait_until(lambda: process.take(100) is not None and process.notes, WAIT, "the view saying it cannot read them")
    finally:
        for sock in (client, upstream, *accepted):
            sock.close()
    assert "not a ZMTP 3 connection" in process.notes[0]


class RawPeer:
    """One end of a ZMTP connection written byte by byte (so a test decides where
    the forwarder's reads are cut), counting what it received."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.setblocking(False)
        self.received = b""

    def read(self) -> bytes:
        with contextlib.suppress(BlockingIOError):
            while chunk := self.sock.recv(1 << 20):
                self.received += chunk
        return self.received

    def send_and_wait(self, data: bytes, other: RawPeer, what: str) -> None:
        """Send `data`, and wait until the other end got it: the forwarder read it
        before anything sent after."""
        expected = len(other.read()) + len(data)
        self.sock.setblocking(True)
        self.sock.sendall(data)
        self.sock.setblocking(False)
        wait_until(lambda: len(other.read()) == expected, WAIT, what)


def test_a_lost_copy_names_its_run_even_when_the_forwarder_read_its_request_id_in_two_pieces(forwarding) -> None:
    """The view is told which runs lost copies by their request ids: a run whose
    id was cut between two reads of the forwarder, in the copies dropped, is named
    too, never unknown (an unknown one counts every run of the driver incomplete)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    process = forwarding(f"tcp://127.0.0.1:{listener.getsockname()[1]}", copy_bytes=4096)
    driver = RawPeer(socket.create_connection(("127.0.0.1", int(process.listen.rsplit(":", 1)[1]))))
    handshake = GREETING + encode([b"\x05READY"], command=True)
    driver.sock.sendall(handshake + encode([b"r" * 32, b"run", b"go"]))
    server: RawPeer | None = None
    accepted: list[RawPeer] = []
    copies: list[Copy] = []

    def the_drivers_connection() -> RawPeer | None:
        with contextlib.suppress(BlockingIOError):
            listener.setblocking(False)
            accepted.append(RawPeer(listener.accept()[0]))
        return next((peer for peer in accepted if b"go" in peer.read()), None)  # the other one is the proxy's health probe

    def view() -> list[Copy]:
        copies.extend(process.take(100))
        return copies

    def seen(run: bytes) -> bool:
        return any(copy.frames and copy.frames[0] == run for copy in view())

    try:
        server = wait_until(the_drivers_connection, WAIT, "the driver's connection at the server")
        server.send_and_wait(handshake + encode([b"m" * 32, b"delta", b"first"]), driver, "the handshake at the driver")
        wait_until(lambda: seen(b"m" * 32), WAIT, "a first delta in the view")
        cut_run = encode([b"y" * 32, b"delta", b"y" * 100])
        server.send_and_wait(encode([b"w" * 32, b"delta", b"w" * 60_000]) + cut_run[:18], driver, "a delta, and the next cut in its request id")
        server.send_and_wait(cut_run[18:], driver, "the rest")
        wait_until(lambda: view() and process.dropped > 0, WAIT, "the copies over the bound dropped")
        server.send_and_wait(encode([b"z" * 32, b"delta", b"z"]), driver, "a later delta")
        wait_until(lambda: seen(b"z" * 32), WAIT, "the view picking up again")
    finally:
        for sock in (listener, driver.sock, *(peer.sock for peer in accepted)):
            sock.close()
    lost = {run for copy in copies for run in copy.lost or ()}
    whole = {copy.frames[0] for copy in copies if copy.direction == TO_DRIVER and copy.frames}
    assert None not in lost, "every run that lost copies is named"
    assert lost == {b"w" * 32, b"y" * 32} - whole and b"w" * 32 in lost, (lost, whole)


BROKEN_COPY = """
import sys
from tracewatch.core.taps import forward_process

def broken(self, leg, data):
    raise RuntimeError("a fault planted in the copy side")

forward_process.PushingForwarder._copy = broken
sys.exit(forward_process.main(sys.argv[1:]))
"""


def test_a_forwarding_thread_that_dies_ends_its_process(context) -> None:
    """A fault in the forwarding thread (here planted in the child) must not leave the
    process alive on its orders loop, forwarding nothing: its drivers would wait for
    ever and the app, seeing the process alive, would not start another. The process
    ends, non-zero, with the fault on its stderr."""
    server, upstream = router(context)
    copies = context.socket(zmq.PULL)
    copies.setsockopt(zmq.LINGER, 0)
    port = copies.bind_to_random_port("tcp://127.0.0.1")
    with TetheredProcess(
        [sys.executable, "-c", BROKEN_COPY, "--listen", "tcp://127.0.0.1:0", "--upstream", upstream, "--copies", f"tcp://127.0.0.1:{port}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        sender = driver(context, child.stdout.readline().decode().strip(), b"d1")
        sender.send_multipart([b"request", pack({"id": "r1"})])
        wait_until(lambda: child.poll() is not None, WAIT, "the forwarding process to end")
        assert child.returncode not in (0, None)
        assert "a fault planted in the copy side" in child.stderr.read().decode()
    for sock in (sender, copies, server):
        sock.close()


class CountingTurns(Forwarder):
    """The forwarder as the forwarding process runs it, counting its loop's turns."""

    turns = 0

    def _tick(self) -> None:
        self.turns += 1


def test_a_reply_owed_to_a_driver_waits_for_the_drivers_own_ready() -> None:
    """A forwarder that replaced a dead one owes each driver that connects the failed
    replies of the runs that were in flight. Put on the connection before the
    driver's libzmq sent its READY, such a reply is a protocol error there: the driver
    drops the connection, reconnects, is owed the replies again, and under load its
    runs waited for ever. The reply waits until the driver's READY went by."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    forwarder = CountingTurns("tcp://127.0.0.1:0", f"tcp://127.0.0.1:{listener.getsockname()[1]}", health_interval=None)
    forwarder.start()
    forwarder.fail(b"r" * 32, "the forwarding process died")
    driver = RawPeer(socket.create_connection(("127.0.0.1", int(forwarder.listen.rsplit(":", 1)[1]))))
    greeting = GREETING[:-31] + b"d" * 31  # its filler tells its connection from the forwarder's own DEALER's
    accepted: list[RawPeer] = []

    def the_drivers_connection() -> RawPeer | None:
        with contextlib.suppress(BlockingIOError):
            accepted.append(RawPeer(listener.accept()[0]))
        return next((peer for peer in accepted if peer.read() == greeting), None)

    try:
        driver.sock.sendall(greeting)  # its READY not yet: libzmq sends it once it has read the server's greeting
        server = wait_until(the_drivers_connection, WAIT, "the driver's greeting at the server")
        server_handshake = GREETING + encode([b"\x05READY"], command=True)
        server.sock.sendall(server_handshake)
        wait_until(lambda: len(driver.read()) >= len(server_handshake), WAIT, "the server's handshake at the driver")
        turns = forwarder.turns
        wait_until(lambda: forwarder.turns >= turns + 3, WAIT, "three turns of the forwarder after the handshake went by")
        assert driver.read() == server_handshake, f"nothing but the server's handshake before the driver's READY: {driver.received!r}"
        driver.sock.sendall(encode([b"\x05READY"], command=True))
        wait_until(lambda: b"the forwarding process died" in driver.read(), WAIT, "the owed reply at the driver after its READY")
    finally:
        forwarder.stop()
        for sock in (listener, driver.sock, *(peer.sock for peer in accepted)):
            sock.close()
    reply_start = encode([b"r" * 32, b"reply", b"payload"])[: 2 + 32 + 2 + 5]
    assert driver.received.startswith(server_handshake + reply_start), "the owed reply, whole, right after the handshake"
