"""Relay the rollouts your own program drives to any number of tracewatch viewers.

    from tracewatch_relay import Relay, RelayedClient

    relay = Relay("tcp://127.0.0.1:7000")          # viewers: tracewatch tap tcp://127.0.0.1:7000
    client = RelayedClient(EnvClient(address), relay)  # every run() is relayed
    # or, by hand, for one run:
    on_delta = relay.begin(task_data, model=model, sampling=sampling)
    episode = await env_client.run(cfg, model, sampling, task_data, on_delta=on_delta)
    on_delta.end(episode)                           # or on_delta.end(error=exc)

It sits in the driver's process, so the driver's thread does as little as it can: per
delta it appends a reference to a queue. `RelayedClient` hands over the very bytes
verifiers' client received (nothing is packed again); a thread takes the queue every
`TICK_SECONDS` while deltas come, packs what it took into one message for every
viewer (in a buffer an earlier message used, once pyzmq sent that one: fresh memory
costs a page fault per 4 KB), and leaves the sending to pyzmq's I/O thread without
copying it. When nothing
comes the thread sleeps in zmq's poll until the driver offers again (one byte down a
pipe, only on the first offer after a quiet) or a heartbeat is due: a clock of its
own would take the GIL from the driver at every tick, idle or not.

What the relay holds is bounded in bytes (`max_bytes`): a quarter for the hand-over
queue, a quarter for the runs in flight (what a viewer that connects late is sent
first; a run too large for it is skipped, and the late viewer told how many were),
half for what viewers have not yet taken, shared between them. A viewer that falls
behind its share (slow, suspended) has messages dropped for it and is told its count
with every message, so it can say its view is incomplete; the driver never grows.
What it lost is told it as runs, in a `loss` that comes before anything else it is
sent after a drop (and at its heartbeats, one at a time, whatever its share): which
runs lost messages and which are still running, so it ends the runs whose end it
missed whenever it reads again, with no more traffic needed. A drop at the hand-over
queue is such a loss for every viewer. At `close()` each viewer is told what it lost
on a notices socket of its own (PUB, by its identity): a backlog of data a stopped
viewer never read, discarded at the close, cannot hold that up.

A viewer is a peer that sent a well-formed hello; anything else is counted
(`garbage`) and ignored. Each viewer is sent the runs in flight once, and a few new
viewers a second at most (the others' hellos wait; a viewer says hello again). A
viewer hears from the relay at least every `HEARTBEAT_SECONDS`, so it notices a relay
that went away. `close()` returns within its bound; what it could not send is
counted (`unsent`).

Runs inside someone else's program, so it depends on the standard library, pyzmq and
msgpack only (and on verifiers' own modules when it wraps verifiers' client); users
import it as `tracewatch_relay`.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import msgpack
import zmq

from tracewatch_guest.framing import (
    BATCH,
    BEGIN,
    BYE,
    CLOSED,
    DELTA,
    HELLO,
    LOSS,
    NO_RUN,
    REPLY,
    WELCOME,
    begin_payload,
    encode,
    failed_reply,
    served_reply,
)

MAX_BYTES = 64 * 2**20
"""What the relay may hold, all viewers together (see the module's docstring)."""
CLOSE_SECONDS = 0.25
"""The longest `close()` keeps its caller by default."""
HEARTBEAT_SECONDS = 1.0
"""A viewer hears from the relay at least this often, news or not."""
WELCOMES_PER_SECOND = 4
"""New viewers sent the runs in flight per second at most."""
TICK_SECONDS = 0.05
"""How often the relay thread takes what the driver queued, while the driver offers:
a viewer is a person, and each wakeup costs the driver's thread the GIL."""
BATCH_BYTES = 1 << 20
BATCH_MESSAGES = 2000
"""The most a viewer is sent as one message (beyond one message that is larger), by
size once packed: a delta handed over unpacked counts as `OBJECT_BYTES` until then."""
NOTICE_LINGER_MS = 50
"""How long the close waits for the notices to leave (they go on an idle connection)."""
IDLE_BATCHES = 2
"""Batch buffers (of two batches' size at most) kept to pack the next batches into."""
OBJECT_BYTES = 256
"""What an unpacked payload (a begin, an end, a delta passed by hand) counts for in the
hand-over queue: its size is not known until the relay thread packs it."""

PEER_BYTES = 1024
"""The largest message a peer may send (a viewer only says hello and bye); a larger
one ends its connection."""

_Message = tuple[bytes, bytes, Any, int]
"""(kind, run, payload as bytes or as the object to pack, its size in bytes)."""


def _running_from(begin: _Message) -> _Message:
    """A run's kept begin once its first delta went out, with when (`running_since`):
    a viewer that joins later is sent the run's deltas at once, yet shows it running
    from there, as a viewer there from the start does."""
    try:
        payload = _pack({**msgpack.unpackb(begin[2]), "running_since": time.time()})
    except Exception:
        return begin
    return (begin[0], begin[1], payload, len(payload))


def _pack(payload: Any) -> bytes:
    packed: bytes = msgpack.packb(payload, use_bin_type=True, default=_fallback)
    return packed


class _Batches:
    """The buffers batches are packed in, each packed into again once every viewer's
    copy of its last batch went out: a buffer new to each batch is fresh memory, a page
    fault per 4 KB in the driver's process. A batch is packed into a buffer of its size
    (plus each message's few bytes of framing) and handed over as it is: `packb` grows
    its buffer by copying, then copies the whole into bytes, three copies of every
    delta where one will do."""

    def __init__(self) -> None:
        self._out: collections.deque[tuple[msgpack.Packer, int, memoryview, list[zmq.MessageTracker]]] = collections.deque()
        """Buffers pyzmq may still be sending from: (packer, the most it held, batch, a
        tracker per viewer it went to)."""
        self._idle: list[tuple[msgpack.Packer, int]] = []

    def pack(self, out: list[tuple[bytes, bytes, bytes]], size: int) -> memoryview:
        self._reap()
        if self._idle:
            packer, largest = self._idle.pop()
        else:
            packer, largest = msgpack.Packer(use_bin_type=True, autoreset=False, buf_size=size + 32 * len(out) + 16), 0
        packer.pack(out)
        batch: memoryview = packer.getbuffer()
        self._out.append((packer, max(largest, len(batch)), batch, []))
        return batch

    def sent(self, tracker: zmq.MessageTracker) -> None:
        """pyzmq took the last batch packed for a viewer: its buffer waits for this."""
        self._out[-1][3].append(tracker)

    def _reap(self) -> None:
        """Every buffer pyzmq is done with is let go or kept to pack into (a viewer that
        holds an older one holds only that one)."""
        out = self._out
        self._out = collections.deque()
        for packer, largest, batch, trackers in out:
            if not all(tracker.done for tracker in trackers):
                self._out.append((packer, largest, batch, trackers))
                continue
            try:
                batch.release()
                packer.reset()
            except BufferError:  # still read by someone: left to the collector
                continue
            if len(self._idle) < IDLE_BATCHES and largest <= 2 * BATCH_BYTES:
                self._idle.append((packer, largest))


def _fallback(value: Any) -> Any:
    """numpy arrays and pydantic models, the way verifiers' own encoder sends them."""
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    tolist = getattr(value, "tolist", None)
    if tolist is not None:
        return tolist()
    return repr(value)


class RunRelay:
    """The `on_delta` of one run; `end` says how it ended."""

    def __init__(self, relay: Relay, run: bytes) -> None:
        self._offer = relay._offer
        self.run = run

    def __call__(self, delta: dict[str, Any]) -> None:
        self._offer(DELTA, self.run, delta, OBJECT_BYTES)

    def raw(self, data: bytes) -> None:
        """A delta as the bytes its server sent (a msgpack map): forwarded as they are."""
        self._offer(DELTA, self.run, data, len(data))

    def end(self, episode: Any = None, *, error: BaseException | str | None = None) -> None:
        self._offer(REPLY, self.run, _Ending(episode, error), OBJECT_BYTES)

    def served(self, head: Any, traces: Any) -> None:
        """The run ended as its server replied: its head, and its traces' sizes."""
        self._offer(REPLY, self.run, _Ending(head, None, traces), OBJECT_BYTES)


class _Ending:
    """How a run ended, turned into its reply only if a viewer is there to take it: a
    huge episode costs the driver a reference."""

    def __init__(self, episode: Any, error: BaseException | str | None, traces: Any = None) -> None:
        self.episode = episode
        self.error = error
        self.traces = traces

    def reply(self) -> dict[str, Any]:
        if self.error is not None or self.episode is None:
            return failed_reply(self.error)
        if self.traces is not None:  # a served run's own reply: its head and trace sizes
            return served_reply(self.episode, ((t.id, t.nodes, t.calls) for t in self.traces))
        return _episode_reply(self.episode)


def _episode_reply(episode: Any) -> dict[str, Any]:
    """The reply a server would have sent for this episode (a model or a dict), its
    traces counted rather than copied."""
    if hasattr(episode, "model_dump"):
        head = episode.model_dump(mode="json", exclude={"traces"})
        traces = [(t.id, len(t.nodes), len(t.calls)) for t in episode.traces or []]
    else:
        head = {key: value for key, value in dict(episode).items() if key != "traces"}
        traces = [(t["id"], len(t["nodes"]), len(t["calls"])) for t in dict(episode).get("traces") or []]
    return served_reply(head, traces)


class _Viewer:
    def __init__(self) -> None:
        self.dropped = 0
        """Messages dropped for this viewer: it fell behind its share."""
        self.sent: collections.deque[tuple[zmq.MessageTracker, int, int, frozenset[bytes]]] = collections.deque()
        """What pyzmq still holds for it: (tracker, bytes, messages, their runs), oldest first."""
        self.held = 0
        self.last_sent = 0.0
        self.lost: set[bytes] = set()
        """Runs it lost messages of that no `loss` told it yet."""
        self.loss: zmq.MessageTracker | None = None
        """The last `loss` sent to it: the next waits until pyzmq let this one go."""
        self.beat: zmq.MessageTracker | None = None
        """The last heartbeat sent to it, the same way."""
        self.base = 0
        """The relay's hand-over drops before it joined (not its loss)."""

    def reap(self) -> None:
        while self.sent and self.sent[0][0].done:
            self.held -= self.sent.popleft()[1]

    def unsent(self) -> int:
        return sum(messages for tracker, _, messages, _ in list(self.sent) if not tracker.done)

    def unsent_runs(self) -> set[bytes]:
        return {run for tracker, _, _, runs in list(self.sent) if not tracker.done for run in runs}


class Relay:
    def __init__(
        self, address: str, max_bytes: int = MAX_BYTES, *, heartbeat: float = HEARTBEAT_SECONDS, welcomes_per_second: float = WELCOMES_PER_SECOND
    ) -> None:
        self.max_bytes = max_bytes
        self.dropped = 0
        """Messages the driver offered while the hand-over queue was full."""
        self.garbage = 0
        """Messages from peers that were not a viewer's hello, bye or a repeated hello."""
        self.skipped = 0
        """Runs in flight too large to keep for viewers that connect late."""
        self.unsent = 0
        """Messages `close()` left unsent (queued, or still in pyzmq for a viewer)."""
        self.heartbeat = heartbeat
        self.welcomes_per_second = welcomes_per_second
        self.id = f"{os.getpid()}-{time.time_ns()}"
        """Tells a viewer this relay from one that comes back at the same address."""
        self._queue: collections.deque[_Message] = collections.deque()
        self._offered = 0
        """Bytes the driver queued (written by the driver's thread only)."""
        self._taken = 0
        """Bytes the relay thread took (written by the relay thread only)."""
        self._gaps: collections.deque[bytes] = collections.deque()
        """Runs the driver offered a message of while the hand-over queue was full
        (appended by the driver's thread, taken by the relay thread)."""
        self._ids = itertools.count()
        self._tasks: dict[str, int] = {}
        self._rollouts_of: dict[int, int] = {}
        self._closing = threading.Event()
        self._counting = threading.Lock()
        self._abandoned = False
        """`close()` returned before the thread was done: its count stands."""
        self._in_hand = 0
        """Messages the relay thread took from the queue and has not yet sent."""
        self._close_by = float("inf")
        self._asleep = False
        """The relay thread waits for the driver's next offer (set by the thread, cleared
        by whoever wakes it)."""
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._socket.setsockopt(zmq.SNDHWM, 0)  # bounded in bytes by the relay itself
        self._socket.setsockopt(zmq.MAXMSGSIZE, PEER_BYTES)
        try:
            self._socket.bind(address)
        except zmq.ZMQError as error:
            self._socket.close()
            self._context.term()
            os.close(self._wake_read)
            os.close(self._wake_write)
            raise OSError(f"the relay cannot listen on {address}: {error}") from None
        self.address = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._notices = self._context.socket(zmq.PUB)
        self._notices.setsockopt(zmq.LINGER, NOTICE_LINGER_MS)
        self.notices_port: int | None = None
        """Where viewers hear of the close: the relay's host, this port (a relay at an
        address that is not TCP has none; its viewers learn of the close by silence)."""
        if self.address.startswith("tcp://"):
            self._notices.bind(self.address.rpartition(":")[0] + ":*")
            self.notices_port = int(self._notices.getsockopt_string(zmq.LAST_ENDPOINT).rpartition(":")[2])
        self._runs: dict[bytes, list[_Message]] = {}
        """Per run in flight, every message so far: what a late viewer is sent first."""
        self._run_bytes: dict[bytes, int] = {}
        self._kept = 0
        self._too_big: set[bytes] = set()
        self._viewers: dict[bytes, _Viewer] = {}
        self._batches = _Batches()
        self._welcome_tokens = float(welcomes_per_second)
        self._welcomed_at = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name=f"tracewatch relay {self.address}", daemon=True)
        self._thread.start()

    @property
    def viewers(self) -> int:
        return len(self._viewers)

    def begin(self, task_data: Any, *, model: Any = None, sampling: Any = None) -> RunRelay:
        """A new run: its task and what it asks for; returns its `on_delta`. The run's
        start and its number among its task's runs travel with it, so every viewer,
        whenever it joined, shows the same."""
        run = str(next(self._ids)).encode()
        task_index, rollout_index = self._number(task_data)
        payload = begin_payload(task_data, model, sampling, started_at=time.time(), task_index=task_index, rollout_index=rollout_index)
        self._offer(BEGIN, run, payload, OBJECT_BYTES)
        return RunRelay(self, run)

    def close(self, timeout: float = CLOSE_SECONDS) -> int:
        """Stop relaying within `timeout` seconds: what is queued is sent meanwhile if
        the viewers take it; how many messages were left unsent (also `unsent`)."""
        self._close_by = time.monotonic() + timeout
        self._closing.set()
        self._wake()
        self._thread.join(timeout + TICK_SECONDS)
        with self._counting:
            if self._thread.is_alive():  # still at work past its bound: what it holds is left
                self._abandoned = True
                self.unsent = len(self._queue) + self._in_hand + sum(viewer.unsent() for viewer in list(self._viewers.values()))
            elif self._wake_write >= 0:
                os.close(self._wake_read)
                os.close(self._wake_write)
                self._wake_read = self._wake_write = -1
        return self.unsent

    def _number(self, task_data: Any) -> tuple[int, int]:
        """The run's task (the same task data is the same task) and its number among them."""
        try:
            fingerprint = json.dumps(task_data, sort_keys=True, default=repr)
        except (TypeError, ValueError):
            fingerprint = repr(task_data)
        task = self._tasks.setdefault(fingerprint, len(self._tasks))
        number = self._rollouts_of.get(task, 0)
        self._rollouts_of[task] = number + 1
        return task, number

    def _offer(self, kind: bytes, run: bytes, payload: Any, size: int) -> None:
        if self._offered - self._taken + size > self.max_bytes // 4:
            self.dropped += 1
            self._gaps.append(run)
            return
        self._offered += size
        self._queue.append((kind, run, payload, size))
        if self._asleep:  # after the append: a thread that just fell asleep sees it or is woken
            self._wake()

    def _wake(self) -> None:
        self._asleep = False
        if self._wake_write < 0:  # closed
            return
        try:
            os.write(self._wake_write, b"\0")
        except OSError:  # the pipe is full (the thread is waking anyway) or closed
            pass

    # -- the relay thread ----------------------------------------------------------

    def _loop(self) -> None:
        sock = self._socket
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_read, zmq.POLLIN)
        try:
            while not self._closing.is_set():
                if not self._queue:
                    self._asleep = True
                    if not self._queue:  # the driver appends, then looks whether we sleep
                        self._wait(poller, self._quiet_seconds())
                    self._asleep = False
                if self._queue and not self._closing.is_set():
                    self._wait(poller, TICK_SECONDS)  # a tick's worth gathers into one batch
                while not self._closing.is_set() and (taken := self._take()):
                    self._relay(taken)
                self._beat()
            self._finish()
        finally:
            sock.close(linger=0)
            self._notices.close()
            self._context.term()

    def _wait(self, poller: zmq.Poller, seconds: float) -> None:
        """Until `seconds` pass or someone wakes the thread; read what peers sent."""
        for source, _ in poller.poll(max(1, int(seconds * 1000))):
            if source is self._socket:
                self._read_peers()
            else:
                os.read(self._wake_read, 4096)

    def _quiet_seconds(self) -> float:
        """How long the thread may sleep with nothing queued: until a heartbeat is due."""
        if not self._viewers:
            return self.heartbeat
        return min(viewer.last_sent for viewer in self._viewers.values()) + self.heartbeat - time.monotonic()

    def _finish(self) -> None:
        """The close: what is queued is sent, and taken, until the bound; the rest counted."""
        while time.monotonic() < self._close_by and (taken := self._take()):
            self._relay(taken)
        while time.monotonic() < self._close_by and any(v.sent and not v.sent[-1][0].done for v in self._viewers.values()):
            time.sleep(0.005)
        with self._counting:
            if not self._abandoned:
                self.unsent = len(self._queue) + sum(viewer.unsent() for viewer in self._viewers.values())
        self._tell_closed()

    def _tell_closed(self) -> None:
        """Each viewer told, on the notices socket, what it lost that no `loss` told
        it: the runs of what was dropped for it and of what it never got (queued, or
        still in pyzmq, which the close discards), and the count of both."""
        self._merge_gaps()
        left = {message[1] for message in list(self._queue)}
        running = self._running()
        for identity, viewer in list(self._viewers.items()):
            lost = viewer.lost | viewer.unsent_runs() | left
            payload = _pack({"lost": sorted(lost), "running": running})
            missed = self._count(viewer) + viewer.unsent() + len(self._queue)
            try:
                self._notices.send_multipart([identity, *encode(CLOSED, NO_RUN, payload, missed)], zmq.NOBLOCK)
            except zmq.ZMQError:
                continue

    def _take(self) -> list[_Message]:
        """The oldest messages queued, up to a batch's worth."""
        taken: list[_Message] = []
        queue = self._queue
        size = 0
        while queue and size < BATCH_BYTES and len(taken) < BATCH_MESSAGES:
            message = queue.popleft()
            size += message[3]
            taken.append(message)
        self._taken += size
        return taken

    def _relay(self, taken: list[_Message]) -> None:
        """Keep each message for late viewers, then send them as batches of
        `BATCH_BYTES` packed (one much larger is dropped whole for a viewer)."""
        if not taken:
            return
        self._merge_gaps()
        self._in_hand = len(taken)
        out: list[tuple[bytes, bytes, bytes]] = []
        size = 0
        watched = bool(self._viewers)
        running = self._running_if_lost()
        for kind, run, payload, _ in taken:
            if kind == REPLY:
                self._forget(run)
                if not watched:
                    continue
            if not isinstance(payload, bytes):
                payload = self._packed(kind, run, payload)
            self._keep(run, kind, payload)
            out.append((kind, run, payload))
            size += len(payload)
            if watched and size >= BATCH_BYTES:
                self._broadcast(out, size, running)
                out, size = [], 0
                running = self._running_if_lost()
        if watched and out:
            self._broadcast(out, size, running)
        self._in_hand = 0

    def _broadcast(self, out: list[tuple[bytes, bytes, bytes]], size: int, running: list[bytes] | None) -> None:
        """One batch to every viewer; `running` as it stood before the batch's messages."""
        batch = self._batches.pack(out, size)
        runs = frozenset(run for _, run, _ in out)
        for identity, viewer in list(self._viewers.items()):
            if (tracker := self._send(identity, viewer, batch, len(out), runs, running)) is not None:
                self._batches.sent(tracker)

    def _merge_gaps(self) -> None:
        """The runs of the hand-over queue's drops, lost for every viewer; taken after
        the queue was, so no later message of such a run goes before its `loss`."""
        while self._gaps:
            run = self._gaps.popleft()
            for viewer in self._viewers.values():
                viewer.lost.add(run)

    def _running(self) -> list[bytes]:
        return [*self._runs, *self._too_big]

    def _running_if_lost(self) -> list[bytes] | None:
        return self._running() if any(viewer.lost for viewer in self._viewers.values()) else None

    def _count(self, viewer: _Viewer) -> int:
        return viewer.dropped + self.dropped - viewer.base

    def _tell_loss(self, identity: bytes, viewer: _Viewer, running: list[bytes] | None) -> bool:
        """A `loss` to this viewer, beyond its share (it is small), unless the last one
        is still in pyzmq (a stopped viewer is sent one, not one a heartbeat)."""
        if viewer.loss is not None and not viewer.loss.done:
            return False
        payload = _pack({"lost": sorted(viewer.lost), "running": self._running() if running is None else running})
        frame = zmq.Frame(payload, copy=False, track=True)
        try:
            self._socket.send_multipart([identity, LOSS, NO_RUN, frame, str(self._count(viewer)).encode()], zmq.NOBLOCK)
        except zmq.ZMQError:
            return False
        viewer.loss = frame.tracker
        viewer.lost = set()
        return True

    def _packed(self, kind: bytes, run: bytes, payload: Any) -> bytes:
        try:
            return _pack(payload.reply() if isinstance(payload, _Ending) else payload)
        except Exception as error:
            return _pack(failed_reply(f"the relay could not pack a {kind.decode()} of run {run.decode()}: {error!r}"))

    def _keep(self, run: bytes, kind: bytes, payload: bytes) -> None:
        if kind == REPLY or run in self._too_big:
            return
        kept = self._runs.setdefault(run, [])
        size = len(payload)
        if kind == DELTA and len(kept) == 1 and kept[0][0] == BEGIN:
            begin = _running_from(kept[0])
            size += begin[3] - kept[0][3]
            kept[0] = begin
        kept.append((kind, run, payload, len(payload)))
        self._run_bytes[run] = self._run_bytes.get(run, 0) + size
        self._kept += size
        while self._kept > self.max_bytes // 4:
            largest = max(self._run_bytes, key=self._run_bytes.__getitem__)
            self._forget(largest)
            self._too_big.add(largest)
            self.skipped += 1

    def _forget(self, run: bytes) -> None:
        self._runs.pop(run, None)
        self._kept -= self._run_bytes.pop(run, 0)
        self._too_big.discard(run)

    def _send(
        self, identity: bytes, viewer: _Viewer, batch: bytes | memoryview, messages: int, runs: frozenset[bytes], running: list[bytes] | None
    ) -> zmq.MessageTracker | None:
        """One message of many to one viewer, or its messages dropped for it when it is
        behind its share of what the relay may hold, or has lost runs that no `loss`
        can tell it yet; what tells when pyzmq let it go."""
        viewer.reap()
        if viewer.held + len(batch) > self.max_bytes // 2 // len(self._viewers) or (viewer.lost and not self._tell_loss(identity, viewer, running)):
            viewer.dropped += messages
            viewer.lost |= runs
            return None
        frame = zmq.Frame(batch, copy=False, track=True)
        try:
            self._socket.send_multipart([identity, BATCH, NO_RUN, frame, str(self._count(viewer)).encode()], zmq.NOBLOCK)
        except zmq.Again:
            viewer.dropped += messages
            viewer.lost |= runs
            return None
        except zmq.ZMQError:  # gone without a bye
            self._viewers.pop(identity, None)
            return None
        tracker: zmq.MessageTracker = frame.tracker
        viewer.sent.append((tracker, len(batch), messages, runs))
        viewer.held += len(batch)
        viewer.last_sent = time.monotonic()
        return tracker

    def _beat(self) -> None:
        self._merge_gaps()
        now = time.monotonic()
        for identity, viewer in list(self._viewers.items()):
            if viewer.lost:  # told whenever it reads again, whatever else comes or not
                self._tell_loss(identity, viewer, None)
            if now - viewer.last_sent >= self.heartbeat:
                self._heartbeat_to(identity, viewer)
                viewer.last_sent = now  # not sent too: the next try is a heartbeat away, not at once

    def _heartbeat_to(self, identity: bytes, viewer: _Viewer) -> None:
        """A heartbeat goes whatever the viewer's share (one at a time: a stopped viewer
        is sent one): a viewer that read its backlog hears the relay within a heartbeat,
        and pyzmq, handed it, lets go of the last batch it held, so the batches the
        share held back go again. Dropped like a batch, a resumed viewer heard nothing
        for seconds and called a live relay gone."""
        viewer.reap()
        if viewer.beat is not None and not viewer.beat.done:
            return
        frame = zmq.Frame(_EMPTY, copy=False, track=True)
        try:
            self._socket.send_multipart([identity, BATCH, NO_RUN, frame, str(self._count(viewer)).encode()], zmq.NOBLOCK)
        except zmq.ZMQError:
            return
        viewer.beat = frame.tracker

    def _read_peers(self) -> None:
        while True:
            try:
                frames = self._socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            identity, words = frames[0], frames[1:]
            if words == [BYE] and identity in self._viewers:
                del self._viewers[identity]
            elif words == [HELLO] and identity not in self._viewers:
                self._welcome(identity)
            elif words != [HELLO]:  # a viewer's hello again is no news
                self.garbage += 1

    def _welcome(self, identity: bytes) -> None:
        """A new viewer: told this relay's id, then sent the runs in flight that fit its
        share, once; a few a second at most (the others' hellos wait for their next)."""
        now = time.monotonic()
        self._welcome_tokens = min(float(self.welcomes_per_second), self._welcome_tokens + (now - self._welcomed_at) * self.welcomes_per_second)
        self._welcomed_at = now
        if self._welcome_tokens < 1:
            return
        self._welcome_tokens -= 1
        viewer = _Viewer()
        viewer.base = self.dropped
        self._viewers[identity] = viewer
        share = self.max_bytes // 2 // len(self._viewers)
        runs, size, skipped = [], 0, len(self._too_big)
        for messages in self._runs.values():
            run_bytes = sum(message[3] for message in messages)
            if size + run_bytes > share:
                skipped += 1
                continue
            runs.append(messages)
            size += run_bytes
        welcome = {
            "in_flight": len(runs), "too_big": skipped, "relay": self.id, "heartbeat": self.heartbeat,
            "you": identity, "notices": self.notices_port,
        }  # fmt: skip
        try:
            self._socket.send_multipart([identity, *encode(WELCOME, NO_RUN, _pack(welcome), 0)], zmq.NOBLOCK)
        except zmq.ZMQError:
            del self._viewers[identity]
            return
        chunk: list[tuple[bytes, bytes, bytes]] = []
        chunk_bytes = 0
        for messages in runs:
            for kind, run, payload, length in messages:
                chunk.append((kind, run, payload))
                chunk_bytes += length
                if chunk_bytes >= BATCH_BYTES:
                    self._send(identity, viewer, _pack(chunk), len(chunk), frozenset(item[1] for item in chunk), None)
                    chunk, chunk_bytes = [], 0
        if chunk:
            self._send(identity, viewer, _pack(chunk), len(chunk), frozenset(item[1] for item in chunk), None)
        viewer.last_sent = now


_EMPTY = _pack([])


class RelayedClient:
    """Wraps a verifiers-style `EnvClient`: every `run()` is relayed, nothing else
    changes (the caller's own `on_delta` still sees each delta)."""

    def __init__(self, client: Any, relay: Relay) -> None:
        self._client = client
        self.relay = relay

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def run(
        self, client: Any, model: str, sampling: Any, task_data: dict[str, Any], on_delta: Callable[[dict[str, Any]], None] | None = None
    ) -> Any:
        relayed = self.relay.begin(task_data, model=model, sampling=sampling)
        try:
            direct = _direct_run(self._client)
            if direct is not None:
                return await direct(client, model, sampling, task_data, relayed, on_delta)

            def both(delta: dict[str, Any]) -> None:
                relayed(delta)
                if on_delta is not None:
                    on_delta(delta)

            episode = await self._client.run(client, model, sampling, task_data, on_delta=both)
        except BaseException as error:
            relayed.end(error=error)
            raise
        relayed.end(episode)
        return episode


def _direct_run(env_client: Any) -> Callable[..., Any] | None:
    """verifiers 0.4.0's `EnvClient.run`, step for step, with the delta bytes it
    receives forwarded before they are decoded; None for a client that is not built
    that way (its `run` is then wrapped as it is, each delta packed again)."""
    request = getattr(env_client, "_request", None)
    validate = getattr(env_client, "_validate_episode", None)
    if request is None or validate is None:
        return None
    try:
        from verifiers.v1.serve.client import EnvClient
        from verifiers.v1.serve.delta import EpisodeAssembly, unpack
        from verifiers.v1.serve.types import RunRequest, RunResponse
    except ImportError:
        return None
    if not isinstance(env_client, EnvClient):
        return None

    async def run(client: Any, model: str, sampling: Any, task_data: dict[str, Any], relayed: RunRelay, on_delta: Any) -> Any:
        assembly = EpisodeAssembly()
        forward = relayed.raw

        def apply(data: bytes) -> None:
            forward(data)
            delta = unpack(data)
            assembly.apply(delta)
            if on_delta is not None:
                on_delta(delta)

        response = await request(RunRequest(task_data=task_data, client=client, model=model, sampling=sampling), RunResponse, on_delta=apply)
        assert response.head is not None
        relayed.served(response.head, response.traces)
        return await validate(assembly.finish(response.head, response.traces))

    return run
