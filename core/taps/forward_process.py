"""The proxy's forwarding, in a process of its own: `python -m core.taps.forward_process
--listen L --upstream U --copies ADDRESS [--copy-queue N]`.

In the app's interpreter the forwarding thread has to take the GIL from the view and
the screen, and every chunk of bytes waits for it; here nothing else runs. The process
relays bytes and reads none of the messages: it finds where they begin (to count them
and to resume after a drop) and pushes the chunks to the app, which reads the messages
out of them. A push is never waited on: when the queue is full the chunk is dropped,
its messages counted, and that leg's copies pick up again at the next message start.
The counters go along every quarter second. The app gives orders on stdin (`cancel
REQUEST_ID`, `fail REQUEST_ID_HEX`, `stop`). End of stdin without a `stop` means the
app died: the drivers' runs are not the app's to end, so forwarding goes on, unwatched,
until the last driver disconnects. The first stdout line is the bound listen address,
or the process exits 2 with the reason on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import TextIO

import msgpack
import zmq

from core.taps.forwarder import TO_DRIVER, TO_SERVER, Copy, Forwarder, ForwarderError, Leg, Link, raise_descriptor_limit
from core.taps.zmtp import ZmtpStream

COPY_QUEUE = 1000
"""Chunks (of at most 64 kB) queued on each side for the app before copies are dropped."""
CLOSE_LINGER_MS = 200
"""How long the copies still queued at the stop may take to reach the app. A second
(the sending default) held the stop that long whenever the app was behind, and the
app reads what is already queued for half a second at most anyway."""
STATUS_EVERY = 0.25
STATUS, CLOSED, RESUMED = b"status", b"closed", b"resumed"
UNWATCHED_POLL = 0.1
"""How often a forwarder whose app died looks whether its drivers have gone."""
FAILED_IN_FLIGHT = (
    "the tracewatch proxy's forwarding process died while this run was in flight; its deltas and reply are lost "
    "(a new forwarding process now listens on the same address)"
)


class PushingForwarder(Forwarder):
    def __init__(self, listen: str, upstream: str, copies: str, copy_queue: int = COPY_QUEUE) -> None:
        super().__init__(listen, upstream)
        self._push_context = zmq.Context()
        self._push = self._push_context.socket(zmq.PUSH)
        self._push.setsockopt(zmq.SNDHWM, copy_queue)
        self._push.setsockopt(zmq.LINGER, 1000)
        self._push.connect(copies)
        self._status_at = 0.0
        self.unwatched = False
        """The app died: the bytes go on, nothing is pushed."""

    def _stream(self) -> ZmtpStream:
        return ZmtpStream(keep=False)

    def _copy(self, leg: Leg, data: bytes) -> None:
        """The chunk to the app if its queue has room; else its messages are
        counted and their request ids kept, so that when the copies pick up again
        the app knows which runs lost some (and only those are incomplete)."""
        if self.unwatched:
            leg.stream.scan(data)  # where messages begin is still needed to answer runs a dead forwarder left
            return
        if not leg.gap:
            inside = leg.stream.under_way
            if self._send(leg, data):
                self.forwarded += leg.stream.scan(data)[0]
                return
            starts, _, _ = leg.stream.scan(data, leg.lost)
            self.forwarded += starts
            leg.gap = True
            self.dropped += starts + int(inside)  # a message begun in a chunk the app got is cut short too
            return
        firsts: list[bytes | None] = []
        starts, first, before = leg.stream.scan(data, firsts)
        self.forwarded += starts
        if first is not None and self._send(leg, data[first:], RESUMED, msgpack.packb([*leg.lost, *firsts[:before]])):
            leg.gap = False
            leg.lost = []
            self.dropped += before
        else:
            leg.lost += firsts
            self.dropped += starts

    def _send(self, leg: Leg, data: bytes, *flag: bytes) -> bool:
        try:
            self._push.send_multipart([leg.direction.encode(), leg.driver, data, *flag], zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def _closed(self, link: Link) -> None:
        if self.unwatched:
            return
        with contextlib.suppress(zmq.Again):
            self._push.send_multipart([CLOSED, link.driver, b""], zmq.NOBLOCK)

    def _tick(self) -> None:
        now = time.monotonic()
        if self.unwatched or now - self._status_at < STATUS_EVERY:
            return
        self._status_at = now
        status = {
            "forwarded": self.forwarded,
            "dropped": self.dropped,
            "drivers": self.drivers,
            "upstream_ok": self.upstream_ok,
            "upstream_note": self.upstream_note,
            "notes": list(self.notes),
        }
        self.notes.clear()
        with contextlib.suppress(zmq.Again):
            self._push.send_multipart([STATUS, b"", msgpack.packb(status)], zmq.NOBLOCK)

    def close(self) -> None:
        self._status_at = 0.0
        self._tick()
        self._push.close(linger=CLOSE_LINGER_MS)
        self._push_context.term()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.taps.forward_process")
    parser.add_argument("--listen", required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--copies", required=True, help="where the app pulls the copies from")
    parser.add_argument("--copy-queue", type=int, default=COPY_QUEUE)
    args = parser.parse_args(argv)
    raise_descriptor_limit()
    forwarder = PushingForwarder(args.listen, args.upstream, args.copies, args.copy_queue)
    try:
        forwarder.start()
    except ForwarderError as error:
        print(error, file=sys.stderr, flush=True)
        return 2
    print(forwarder.listen, flush=True)
    try:
        if not obey(forwarder, sys.stdin):
            forwarder.unwatched = True
            while forwarder.drivers:
                time.sleep(UNWATCHED_POLL)
    except KeyboardInterrupt:
        pass
    forwarder.stop()
    forwarder.close()
    return 0


def obey(forwarder: PushingForwarder, orders: TextIO) -> bool:
    """Carry out the app's orders until it says stop (True) or its end of the pipe
    closes without a word (False: it died)."""
    for line in orders:
        order, _, argument = line.strip().partition(" ")
        if order == "stop":
            return True
        if order == "cancel" and argument:
            forwarder.cancel(argument)
        elif order == "fail" and argument:
            with contextlib.suppress(ValueError):
                forwarder.fail(bytes.fromhex(argument), FAILED_IN_FLIGHT)
    return False



class ForwardingProcess:
    """The app's handle on a forwarding process: what `ProxyVariant` reads of a
    `Forwarder`, with the forwarding itself out of the app's interpreter."""

    def __init__(self, listen: str, upstream: str, start_timeout: float = 30.0, copy_queue: int = COPY_QUEUE) -> None:
        self.listen = listen
        self.upstream = upstream
        self.start_timeout = start_timeout
        self.copy_queue = copy_queue
        self.forwarded = 0
        self.dropped = 0
        self.drivers = 0
        self.upstream_ok: bool | None = None
        self.upstream_note = "not probed yet"
        self.notes: list[str] = []
        """What the view could not read (a connection that is not ZMTP 3, or encrypted)."""
        self._streams: dict[tuple[bytes, bytes], ZmtpStream] = {}
        self._gapped: dict[tuple[bytes, bytes], list[bytes | None]] = {}
        """Streams that resumed after lost copies -> the first frames of the messages
        lost (None: not known), until their next whole message."""
        self._context = zmq.Context()
        self._pull = self._context.socket(zmq.PULL)
        self._pull.setsockopt(zmq.RCVHWM, copy_queue)
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
            [sys.executable, "-m", "core.taps.forward_process", "--listen", self.listen, "--upstream", self.upstream, "--copies", self._copies,
             "--copy-queue", str(self.copy_queue)],
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
        while len(taken) < limit:
            try:
                frames = self._pull.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            kind, driver = frames[0], frames[1]
            if kind == STATUS:
                self._status(frames[2])
            elif kind == CLOSED:
                for direction in (TO_SERVER, TO_DRIVER):
                    self._streams.pop((driver, direction.encode()), None)
            else:
                self._read(kind, driver, frames[2], frames[4] if len(frames) > 4 else None, now, taken)
        return taken

    def _read(self, kind: bytes, driver: bytes, data: bytes, resumed: bytes | None, now: float, taken: list[Copy]) -> None:
        stream = self._streams.get((driver, kind))
        if stream is None:
            stream = self._streams[(driver, kind)] = ZmtpStream(keep=True)
        if resumed is not None:
            cut = stream.resume()
            self._gapped.setdefault((driver, kind), []).extend([*cut, *lost_ids(resumed)])
        readable = stream.unreadable is None
        direction = kind.decode()
        messages = stream.feed(data)
        if messages and (lost := self._gapped.pop((driver, kind), None)) is not None:
            taken.append(Copy(direction, driver, messages.pop(0), now, lost=tuple(lost)))
        taken.extend(Copy(direction, driver, message, now) for message in messages)
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
            self.upstream_ok = status["upstream_ok"]
            self.upstream_note = str(status["upstream_note"])
            self.notes.extend(str(note) for note in status.get("notes", ()))


def lost_ids(packed: bytes) -> list[bytes | None]:
    """The first frames a resumed chunk says were lost before it (None: not known)."""
    try:
        ids = msgpack.unpackb(packed)
    except Exception:
        return [None]
    if not isinstance(ids, list):
        return [None]
    return [i if isinstance(i, bytes) else None for i in ids]


if __name__ == "__main__":
    sys.exit(main())
