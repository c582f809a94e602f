"""The proxy's forwarding, in a process of its own: `python -m tracewatch.core.taps.forward_process
--listen L --upstream U --copies ADDRESS [--copy-bytes N]`.

In the app's interpreter the forwarding thread has to take the GIL from the view and
the screen, and every chunk of bytes waits for it; here nothing else runs. The process
relays bytes and reads none of the messages: it finds where they begin (to count them,
to shed whole ones and to resume after a drop) and pushes the chunks to the app, which
reads the messages out of them. A push is never waited on: the app says how many bytes
it took, and past the bound what gathered is dropped, its messages counted, and that
leg's copies pick up again at the next message start; the replies in it are kept and
handed over, with the news of what was lost, as soon as the app has room, whether or
not more copies come (a view resumed after its runs ended must still end them). The
counters go along every
quarter second. The app gives orders on stdin (`cancel REQUEST_ID`, `fail
REQUEST_ID_HEX`, `took BYTES`, `stop`). End of stdin without a `stop` means the
app died: the drivers' runs are not the app's to end, so forwarding goes on, unwatched,
until no driver has been connected for `UNWATCHED_GRACE`. The first stdout line is the bound listen address,
or the process exits 2 with the reason on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import TextIO

import msgpack
import zmq

from tracewatch.core.taps.forwarder import (
    DRIVER_LEFT,
    SERVER_LEFT,
    TO_DRIVER,
    TO_SERVER,
    Copy,
    Forwarder,
    ForwarderError,
    Leg,
    Link,
    raise_descriptor_limit,
)
from tracewatch.core.taps.zmtp import ZmtpStream, second_frame
from tracewatch.core.wire.protocol import KIND_REPLY

COPY_BYTES = 64 << 20
"""Copies the app may have not yet taken, in bytes, before copies are dropped. Past
half of it, the copies of runs that already lost some are shed first, so a burst
costs as few runs their wholeness as it can."""
INCOMPLETE_KEPT = 65536
"""Runs remembered as having lost copies (the oldest forgotten first)."""
REPLIES_KEPT = 4 << 20
"""Bytes of replies kept from dropped copies, every leg's together, until the view has
room for them: a reply is small and says how its run ended, so a view that fell
behind still ends the run as it ended. A reply past this is told by its run alone."""
REPLY_HELD = 1 << 20
"""A reply not yet whole when its leg's copies go is held back until it is (up to
this size), so that a reply is handed over, or kept, whole, never cut by a drop."""
ACK_EVERY = 0.1
"""How often, at most, the app says how many bytes of copies it took. Each word wakes
the process's main thread, whose turn at the GIL the forwarding thread then waits
for: said much more often, it multiplied the p99 a driver's frame took through the
proxy (docs/performance.md)."""
ACK_CAUGHT_UP = 0.02
"""How soon the app says so once it has taken every copy queued."""
CLOSE_LINGER_MS = 200
"""How long the copies still queued at the stop may take to reach the app. A second
(the sending default) held the stop that long whenever the app was behind, and the
app reads what is already queued for half a second at most anyway."""
FLUSH_SECONDS = 0.05
"""How long copies gather before they go to the app, one message per leg. Pushed as
they came, a server streaming at its own pace (a delta per read) woke pyzmq's I/O
thread and the app for every delta; pushed more often, the pushes were still much
of the forwarding thread's busy time (docs/performance.md). The bytes themselves are
never held, and the view, a screen redrawn at 30 Hz or headless lines, does not miss
the wait."""
FLUSH_BYTES = 65536
"""A leg's copies go at once when this many have gathered."""
STATUS_EVERY = 0.25
STATUS, CLOSED, RESUMED = b"status", b"closed", b"resumed"
UNWATCHED_POLL = 0.1
"""How often a forwarder whose app died looks whether its drivers have gone."""
UNWATCHED_GRACE = 5.0
"""How long a forwarder whose app died serves on with no driver, for one that is
connecting: counted from the app's death, then from the last driver's going."""
FAILED_IN_FLIGHT = (
    "the tracewatch proxy's forwarding process died while this run was in flight; its deltas and reply are lost "
    "(a new forwarding process now listens on the same address)"
)


class PushingForwarder(Forwarder):
    def __init__(self, listen: str, upstream: str, copies: str, copy_bytes: int = COPY_BYTES) -> None:
        super().__init__(listen, upstream)
        self.copy_bytes = copy_bytes
        self.pushed = 0
        """Bytes of copies pushed to the app."""
        self.taken = 0
        """Of those, bytes the app says it took (set from its orders)."""
        self._incomplete: dict[tuple[bytes, bytes], None] = {}
        """Runs (driver, request id) whose copies were dropped: the first to shed."""
        self._push_context = zmq.Context()
        self._push = self._push_context.socket(zmq.PUSH)
        self._push.setsockopt(zmq.SNDHWM, 0)  # bounded in bytes, by what the app says it took
        self._push.setsockopt(zmq.LINGER, 1000)
        self._push.connect(copies)
        self._status_at = 0.0
        self.unwatched = False
        """The app died: the bytes go on, nothing is pushed."""
        self._pending: dict[Leg, None] = {}
        """The legs with copies gathered, in the order they began gathering."""
        self._flush_at = 0.0
        """When what is gathered goes to the app."""
        self._owed: dict[Leg, None] = {}
        """Legs whose view is owed a resume: copies were dropped since it last heard."""
        self._kept = 0
        """Bytes of replies kept from dropped copies, every leg's."""
        self._closing: list[Link] = []
        """Links that closed while a resume was owed to their view: told closed after it."""

    def _stream(self) -> ZmtpStream:
        return ZmtpStream(keep=False)

    def _copy(self, leg: Leg, data: bytes) -> None:
        """The chunk gathered for the app; after a gap, or a message shed, from the
        next message start on. Where messages begin (and their request ids) is noted
        as it comes, to shed whole messages and to know which runs lost copies."""
        if self.unwatched:
            leg.stream.scan(data)  # where messages begin is still needed to answer runs a dead forwarder left
            return
        if not (leg.pending or leg.gap or leg.skipping):
            leg.inside = leg.stream.under_way
        firsts: list[bytes | None] = []
        offsets: list[int] = []
        held = leg.stream.held
        starts, first, before = leg.stream.scan(data, firsts, offsets)
        data = held + data  # gathered once a message's request id is whole: a drop knows its run
        data = data[: len(data) - len(leg.stream.held)]
        self.forwarded += starts
        if leg.gap or leg.skipping:
            if leg.gap:
                self._lose(leg, firsts if first is None else firsts[:before])
            if first is None:
                self.dropped += starts
                return
            self.dropped += before
            leg.gap = leg.skipping = leg.inside = False
            data, firsts, offsets = data[first:], firsts[before:], [at - first for at in offsets[before:]]
        if leg.sibling in self._pending:
            self._flush(leg.sibling)  # the view reads a run's request before its deltas, a reply before the next request
        if not self._pending:
            self._flush_at = time.monotonic() + FLUSH_SECONDS
        base = len(leg.pending)
        leg.pending += data
        leg.firsts += firsts
        leg.offsets += [at + base for at in offsets]
        self._pending[leg] = None
        if len(leg.pending) >= FLUSH_BYTES:
            self._flush(leg)

    def _flush(self, leg: Leg) -> None:
        """What `leg` gathered to the app, after what a drop before it owes the view,
        if it fits in what the app may fall behind by; else it is dropped (`_drop`).
        Past half of the bound, the runs that lost copies already lose the rest
        first. A reply not yet whole stays gathering until it is."""
        del self._pending[leg]
        queued = self.pushed - self.taken
        if self._incomplete and leg.direction == TO_DRIVER and queued + len(leg.pending) > self.copy_bytes // 2:
            self._shed(leg)
        held = self._hold_reply(leg)
        if leg.pending:
            data = leg.kept + leg.pending if leg.resume else leg.pending
            if queued + len(data) <= self.copy_bytes and self._send(leg, data, *self._resumed(leg)):
                self.pushed += len(data)
                self._told(leg)
            else:
                self._drop(leg, holding=held is not None)
        leg.pending, leg.firsts, leg.offsets, leg.inside = bytearray(), [], [], False
        if held is not None:
            leg.pending, leg.firsts, leg.offsets = held[0], [held[1]], [0]

    def _hold_reply(self, leg: Leg) -> tuple[bytearray, bytes | None] | None:
        """Take off the end of what `leg` gathered a reply (or a message whose kind
        is not read yet) that is not whole, to go (or be kept) once it is: a reply
        cut by a drop would be lost with its run's ending."""
        if leg.direction != TO_DRIVER or not leg.offsets or leg.skipping or not leg.stream.under_way:
            return None
        start = leg.offsets[-1]
        if second_frame(leg.pending, start) not in (KIND_REPLY, None) or len(leg.pending) - start > REPLY_HELD:
            return None
        held = (leg.pending[start:], leg.firsts[-1])
        del leg.pending[start:]
        leg.firsts, leg.offsets = leg.firsts[:-1], leg.offsets[:-1]
        return held

    def _drop(self, leg: Leg, holding: bool) -> None:
        """What `leg` gathered does not fit: its whole replies are kept for the view
        (up to `REPLIES_KEPT`; past it their runs are told as having lost their end),
        the rest is dropped and counted and its runs named, so the view knows which
        runs lost some (only those are incomplete). The view reads on from the next
        message start (or the reply held back), told so with the next copies or on
        its own."""
        pending, lost, kept = leg.pending, [], 0
        whole_to = len(pending) if holding or leg.skipping or not (leg.stream.under_way and leg.offsets) else leg.offsets[-1]
        ends = [*leg.offsets[1:], len(pending)][: len(leg.offsets)]
        for start, first, end in zip(leg.offsets, leg.firsts, ends, strict=True):
            if leg.direction == TO_DRIVER and first is not None and second_frame(pending, start) == KIND_REPLY:
                self._incomplete.pop((leg.driver, first), None)
                if start < whole_to and self._kept + end - start <= REPLIES_KEPT:
                    leg.kept += pending[start:end]
                    self._kept += end - start
                    kept += 1
                else:
                    leg.ended.append(first)
                continue
            lost.append(first)
        self.dropped += len(leg.firsts) - kept + int(leg.inside)  # a message begun in copies the app got is cut short too
        self._lose(leg, lost)
        leg.gap, leg.skipping = not holding, False

    def _lose(self, leg: Leg, firsts: list[bytes | None]) -> None:
        """These messages of `leg` were dropped: the view is owed a resume naming
        their runs (a run's id once, however many of its copies)."""
        leg.lost = list(dict.fromkeys([*leg.lost, *firsts]))
        leg.resume = True
        self._owed[leg] = None
        self._mark(leg, firsts)

    def _resumed(self, leg: Leg) -> tuple[bytes, ...]:
        """The flag that goes with `leg`'s next copies, if a resume is owed."""
        if not leg.resume:
            return ()
        return RESUMED, msgpack.packb({"lost": leg.lost, "ended": leg.ended})

    def _told(self, leg: Leg) -> None:
        """`leg`'s view got what it was owed."""
        if leg.resume:
            self._kept -= len(leg.kept)
            leg.kept, leg.lost, leg.ended, leg.resume = bytearray(), [], [], False
            self._owed.pop(leg, None)

    def _tell(self, room: float) -> None:
        """The resumes owed to legs with nothing gathered go on their own, with the
        replies kept, while the copies queued leave them `room` (or none are queued:
        replies kept past `room` go then): what a drop cost reaches the view though no
        more copies of that leg come (its runs ended, its driver closed). Then the
        links that closed meanwhile are told closed."""
        for leg in list(self._owed):
            queued = self.pushed - self.taken
            if leg in self._pending or (queued and queued + len(leg.kept) > room):
                continue  # it goes with the copies gathered, or once the view took more
            if self._send(leg, leg.kept, *self._resumed(leg)):
                self.pushed += len(leg.kept)
                self._told(leg)
        for link in list(self._closing):
            if not any(leg in self._owed for leg in link.legs):
                self._closing.remove(link)
                self._tell_closed(link)

    def _shed(self, leg: Leg) -> None:
        """Drop from what `leg` gathered the whole messages of runs that already lost
        copies (not their replies: a run's ending is small and says how it ended).
        A last message that goes on past the gathered bytes is shed to its end."""
        if not leg.offsets:
            return  # the middle of a message whose start went to the app before
        pending, kept = leg.pending, bytearray()
        firsts: list[bytes | None] = []
        offsets: list[int] = []
        cursor = 0
        ends = [*leg.offsets[1:], len(pending)]
        for start, first, end in zip(leg.offsets, leg.firsts, ends, strict=True):
            if first is not None and (leg.driver, first) in self._incomplete:
                kind = second_frame(pending, start)
                if kind == KIND_REPLY:
                    del self._incomplete[(leg.driver, first)]
                elif kind is not None:
                    kept += pending[cursor:start]
                    cursor = end
                    self.dropped += 1
                    if end == len(pending) and leg.stream.under_way:
                        leg.skipping = True
                    continue
            firsts.append(first)
            offsets.append(len(kept) + start - cursor)
        kept += pending[cursor:]
        leg.pending, leg.firsts, leg.offsets = kept, firsts, offsets

    def _mark(self, leg: Leg, firsts: list[bytes | None]) -> None:
        """These runs lost copies: theirs are the first shed from now on."""
        if leg.direction != TO_DRIVER:
            return
        for first in firsts:
            if first is not None:
                self._incomplete[(leg.driver, first)] = None
        while len(self._incomplete) > INCOMPLETE_KEPT:
            del self._incomplete[next(iter(self._incomplete))]

    def _flush_all(self) -> None:
        for leg in list(self._pending):
            self._flush(leg)

    def _poll_ms(self) -> int:
        if not self._pending:
            return super()._poll_ms()
        return max(0, min(super()._poll_ms(), math.ceil((self._flush_at - time.monotonic()) * 1000)))

    def _send(self, leg: Leg, data: bytes | bytearray, *flag: bytes) -> bool:
        try:
            self._push.send_multipart([leg.direction.encode(), leg.driver, data, *flag], zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def _closed(self, link: Link) -> None:
        if self.unwatched:
            return
        for leg in link.legs:
            if leg in self._pending:
                self._flush(leg)
        if any(leg in self._owed for leg in link.legs):
            self._closing.append(link)  # told closed after what its view is owed
        else:
            self._tell_closed(link)

    def _tell_closed(self, link: Link) -> None:
        with contextlib.suppress(zmq.Again):
            self._push.send_multipart([CLOSED, link.driver, (DRIVER_LEFT if link.driver_left else SERVER_LEFT).encode()], zmq.NOBLOCK)

    def _tick(self) -> None:
        now = time.monotonic()
        if self._pending and now >= self._flush_at:
            self._flush_all()
        if self.unwatched:
            return
        if self._owed or self._closing:
            self._tell(self.copy_bytes // 2)
        if now - self._status_at < STATUS_EVERY:
            return
        self._status_at = now
        status = {
            "forwarded": self.forwarded,
            "dropped": self.dropped,
            "drivers": self.drivers,
            "queued": self.pushed - self.taken,
            "upstream_ok": self.upstream_ok,
            "upstream_note": self.upstream_note,
            "notes": list(self.notes),
        }
        self.notes.clear()
        with contextlib.suppress(zmq.Again):
            self._push.send_multipart([STATUS, b"", msgpack.packb(status)], zmq.NOBLOCK)

    def close(self) -> None:
        self._flush_all()
        self._tell(room=math.inf)  # the app reads what is queued at the stop: the runs' endings with it
        self._status_at = 0.0
        self._tick()
        self._push.close(linger=CLOSE_LINGER_MS)
        self._push_context.term()


THREAD_DIED = 70
"""The exit status when a thread of the process raised. A forwarding thread that died
would leave the process alive on its orders loop, forwarding nothing: its drivers would
wait for ever and the app, seeing it alive, would not start another."""


def end_on_thread_error(args: threading.ExceptHookArgs) -> None:
    """The fault on stderr, then the process ends: a dead forwarder the app notices
    (it fails the runs in flight and starts another on the same port)."""
    threading.__excepthook__(args)
    sys.stderr.flush()
    os._exit(THREAD_DIED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tracewatch.core.taps.forward_process")
    parser.add_argument("--listen", required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--copies", required=True, help="where the app pulls the copies from")
    parser.add_argument("--copy-bytes", type=int, default=COPY_BYTES)
    args = parser.parse_args(argv)
    threading.excepthook = end_on_thread_error
    raise_descriptor_limit()
    forwarder = PushingForwarder(args.listen, args.upstream, args.copies, args.copy_bytes)
    try:
        forwarder.start()
    except ForwarderError as error:
        print(error, file=sys.stderr, flush=True)
        return 2
    print(forwarder.listen, flush=True)
    try:
        if not obey(forwarder, sys.stdin):
            forwarder.unwatched = True
            serve_unwatched(forwarder)
    except KeyboardInterrupt:
        pass
    forwarder.stop()
    forwarder.close()
    return 0


def serve_unwatched(forwarder: PushingForwarder) -> None:
    """Forward until no driver has been connected for `UNWATCHED_GRACE`. Before, the
    process ended as soon as it counted no driver, and a driver whose connection the
    forwarding thread had not yet accepted (one starting as the app died) was left
    with nothing listening: no health reply, ever (2 of 16 kills of a freshly started
    proxy's app)."""
    idle_since = time.monotonic()
    while forwarder.drivers or time.monotonic() - idle_since < UNWATCHED_GRACE:
        if forwarder.drivers:
            idle_since = time.monotonic()
        time.sleep(UNWATCHED_POLL)


def obey(forwarder: PushingForwarder, orders: TextIO) -> bool:
    """Carry out the app's orders until it says stop (True) or its end of the pipe
    closes without a word (False: it died)."""
    for line in orders:
        order, _, argument = line.strip().partition(" ")
        if order == "stop":
            return True
        if order == "took" and argument.isdigit():
            forwarder.taken = int(argument)
        elif order == "cancel" and argument:
            forwarder.cancel(argument)
        elif order == "fail" and argument:
            with contextlib.suppress(ValueError):
                forwarder.fail(bytes.fromhex(argument), FAILED_IN_FLIGHT)
    return False



class ForwardingProcess:
    """The app's handle on a forwarding process: what `ProxyVariant` reads of a
    `Forwarder`, with the forwarding itself out of the app's interpreter."""

    def __init__(self, listen: str, upstream: str, start_timeout: float = 30.0, copy_bytes: int = COPY_BYTES) -> None:
        self.listen = listen
        self.upstream = upstream
        self.start_timeout = start_timeout
        self.copy_bytes = copy_bytes
        self.forwarded = 0
        self.dropped = 0
        self.drivers = 0
        self.queued = 0
        """Bytes of copies pushed that this side had not taken, at the last status."""
        self.upstream_ok: bool | None = None
        self.upstream_note = "not probed yet"
        self._taken = 0
        """Bytes of copies taken, told to the process (its queue's bound is in bytes)."""
        self._told: tuple[int, float] = (0, 0.0)
        self.notes: list[str] = []
        """What the view could not read (a connection that is not ZMTP 3, or encrypted)."""
        self._streams: dict[tuple[bytes, bytes], ZmtpStream] = {}
        self._context = zmq.Context()
        self._pull = self._context.socket(zmq.PULL)
        self._pull.setsockopt(zmq.RCVHWM, 0)
        self._pull.setsockopt(zmq.LINGER, 0)
        self._copies = f"tcp://127.0.0.1:{self._pull.bind_to_random_port('tcp://127.0.0.1')}"
        self._stderr = tempfile.TemporaryFile()
        self._process: subprocess.Popen[bytes] | None = None
        self._stopped = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Spawn the process and wait for its listen address; a refusal (the address
        is in use) is a `ForwarderError` with the process's own words."""
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tracewatch.core.taps.forward_process", "--listen", self.listen, "--upstream", self.upstream, "--copies", self._copies,
             "--copy-bytes", str(self.copy_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            start_new_session=True,  # the terminal's Ctrl-C is the app's to act on, not ours
        )
        assert self._process.stdout is not None
        ready = select.select([self._process.stdout], [], [], self.start_timeout)[0]
        line = self._process.stdout.readline().decode().strip() if ready else ""
        if not line:
            self._process.kill()
            self._process.wait()
            self._stderr.seek(0)
            why = self._stderr.read().decode(errors="replace").strip().splitlines()
            self._close_sockets()
            raise ForwarderError(why[-1] if why else f"the forwarding process did not start within {self.start_timeout:g}s")
        self.listen = line

    def cancel(self, request_id: str) -> None:
        self._order(f"cancel {request_id}")

    def fail(self, request_ids: list[bytes]) -> None:
        """Have every driver that connects told these runs failed (they were in
        flight through a forwarder that died)."""
        for request_id in request_ids:
            self._order(f"fail {request_id.hex()}")

    def _order(self, line: str) -> None:
        if self._process is not None and self._process.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self._process.stdin.write(f"{line}\n".encode())
                self._process.stdin.flush()

    def died(self) -> str | None:
        """How the process ended, if it ended without being stopped (it is reaped here)."""
        process = self._process
        if process is None or self._stopped or (code := process.poll()) is None:
            return None
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def take(self, limit: int) -> list[Copy]:
        """The messages in the chunks that came, until there are `limit` or no more."""
        taken: list[Copy] = []
        now = time.time()
        caught_up = False
        while len(taken) < limit:
            try:
                frames = self._pull.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                caught_up = True
                break
            kind, driver = frames[0], frames[1]
            if kind == STATUS:
                self._status(frames[2])
            elif kind == CLOSED:
                for direction in (TO_SERVER, TO_DRIVER):
                    self._streams.pop((driver, direction.encode()), None)
                taken.append(Copy(TO_DRIVER, driver, [], now, closed=frames[2].decode(errors="replace")))
            else:
                self._taken += len(frames[2])
                self._read(kind, driver, frames[2], frames[4] if len(frames) > 4 else None, now, taken)
        self._tell_taken(caught_up)
        return taken

    def _tell_taken(self, caught_up: bool) -> None:
        """Say how many bytes of copies were taken, at most every ACK_EVERY while
        copies wait, sooner once none do (a stale count would drop copies that fit)."""
        told, at = self._told
        clock = time.monotonic()
        if self._taken != told and clock - at >= (ACK_CAUGHT_UP if caught_up else ACK_EVERY):
            self._told = (self._taken, clock)
            self._order(f"took {self._taken}")

    def _read(self, kind: bytes, driver: bytes, data: bytes, resumed: bytes | None, now: float, taken: list[Copy]) -> None:
        stream = self._streams.get((driver, kind))
        if stream is None:
            stream = self._streams[(driver, kind)] = ZmtpStream(keep=True)
        direction = kind.decode()
        if resumed is not None:  # the news goes first, on its own: the replies after it may be all that come
            cut = stream.resume()
            lost, ended = resume_notice(resumed)
            taken.append(Copy(direction, driver, [], now, lost=(*cut, *lost), ended=tuple(ended)))
        readable = stream.unreadable is None
        taken.extend(Copy(direction, driver, message, now) for message in stream.feed(data))
        if readable and stream.unreadable is not None:
            self.notes.append(f"driver {driver.decode()}: {stream.unreadable}; its frames go on, unseen")

    def stop(self, timeout: float = 5.0) -> None:
        """The stop order: the process stops forwarding and exits."""
        process = self._process
        if process is not None:
            self._order("stop")
            self._stopped = True
            with contextlib.suppress(OSError):
                if process.stdin is not None:
                    process.stdin.close()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def close(self) -> None:
        self._close_sockets()
        self._stderr.close()

    def _close_sockets(self) -> None:
        self._pull.close(linger=0)
        self._context.term()

    def _status(self, data: bytes) -> None:
        with contextlib.suppress(Exception):
            status = msgpack.unpackb(data)
            self.forwarded = int(status["forwarded"])
            self.dropped = int(status["dropped"])
            self.drivers = int(status["drivers"])
            self.queued = int(status["queued"])
            self.upstream_ok = status["upstream_ok"]
            self.upstream_note = str(status["upstream_note"])
            self.notes.extend(str(note) for note in status.get("notes", ()))


def resume_notice(packed: bytes) -> tuple[list[bytes | None], list[bytes]]:
    """What a resume says was dropped before it: the first frames of the messages
    lost (None: not known), and the runs whose reply was lost."""
    try:
        notice = msgpack.unpackb(packed)
    except Exception:
        return [None], []
    lost = notice.get("lost") if isinstance(notice, dict) else None
    ended = notice.get("ended") if isinstance(notice, dict) else None
    return (
        [i if isinstance(i, bytes) else None for i in lost] if isinstance(lost, list) else [None],
        [i for i in ended if isinstance(i, bytes)] if isinstance(ended, list) else [],
    )


if __name__ == "__main__":
    sys.exit(main())
