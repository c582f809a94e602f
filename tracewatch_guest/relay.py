"""Relay the rollouts your own program drives to any number of tracewatch viewers.

    from tracewatch_relay import Relay, RelayedClient

    relay = Relay("tcp://127.0.0.1:7000")          # viewers: tracewatch tap tcp://127.0.0.1:7000
    client = RelayedClient(EnvClient(address), relay)  # every run() is relayed
    # or, by hand, for one run:
    on_delta = relay.begin(task_data, model=model, sampling=sampling)
    episode = await env_client.run(cfg, model, sampling, task_data, on_delta=on_delta)
    on_delta.end(episode)                           # or on_delta.end(error=exc)

A viewer that connects late first gets every run still in flight as it stands (its
begin and every delta so far), then the live deltas. The caller never waits: each
call only appends to a bounded queue, and a thread does the packing and the sending;
when the queue is full the message is dropped and counted (`relay.dropped`), and each
viewer is told its own count so it can say its view is incomplete.

Runs inside someone else's program, so it depends on the standard library, pyzmq and
msgpack only; users import it as `tracewatch_relay`.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable
from typing import Any

import msgpack
import zmq

from tracewatch_guest.framing import (
    BEGIN,
    BYE,
    DELTA,
    NO_RUN,
    REPLY,
    WELCOME,
    begin_payload,
    encode,
    failed_reply,
    served_reply,
)

QUEUE = 100_000
"""Messages the caller may be ahead of the relay thread before new ones are dropped."""
VIEWER_QUEUE = 100_000
"""Messages a slow viewer may fall behind by before its own are dropped."""
POLL_MS = 2


def _pack(payload: Any) -> bytes:
    packed: bytes = msgpack.packb(payload, use_bin_type=True, default=_fallback)
    return packed


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
        self._relay = relay
        self.run = run

    def __call__(self, delta: dict[str, Any]) -> None:
        self._relay._offer(DELTA, self.run, delta)

    def end(self, episode: Any = None, *, error: BaseException | str | None = None) -> None:
        self._relay._offer(REPLY, self.run, _reply(episode, error))


class Relay:
    def __init__(self, address: str, queue: int = QUEUE) -> None:
        self.capacity = queue
        self.dropped = 0
        self._queue: collections.deque[tuple[bytes, bytes, Any]] = collections.deque()
        self._ids = itertools.count()
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._socket.setsockopt(zmq.SNDHWM, VIEWER_QUEUE)
        try:
            self._socket.bind(address)
        except zmq.ZMQError as error:
            self._socket.close()
            self._context.term()
            raise OSError(f"the relay cannot listen on {address}: {error}") from None
        self.address = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"tracewatch relay {self.address}", daemon=True)
        self._thread.start()

    def begin(self, task_data: Any, *, model: Any = None, sampling: Any = None) -> RunRelay:
        """A new run: its task and what it asks for; returns its `on_delta`."""
        run = str(next(self._ids)).encode()
        self._offer(BEGIN, run, begin_payload(task_data, model, sampling))
        return RunRelay(self, run)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _offer(self, kind: bytes, run: bytes, payload: Any) -> None:
        if len(self._queue) < self.capacity:
            self._queue.append((kind, run, payload))
        else:
            self.dropped += 1

    # -- the relay thread ----------------------------------------------------------

    def _loop(self) -> None:
        runs: dict[bytes, list[tuple[bytes, bytes, bytes]]] = {}
        """Per run in flight, every message so far: what a late viewer is sent first."""
        viewers: dict[bytes, int] = {}
        """Viewer identity -> messages it missed."""
        sock = self._socket
        try:
            while not self._stop.is_set():
                if sock.poll(POLL_MS):
                    self._greet(sock, runs, viewers)
                while self._queue:
                    kind, run, payload = self._queue.popleft()
                    try:
                        message = (kind, run, _pack(payload))
                    except Exception as error:
                        message = (REPLY, run, _pack(failed_reply(f"the relay could not pack a {kind.decode()}: {error!r}")))
                    if message[0] == REPLY:
                        runs.pop(run, None)
                    else:
                        runs.setdefault(run, []).append(message)
                    for viewer in list(viewers):
                        self._send(sock, viewers, viewer, message)
        finally:
            sock.close(linger=0)
            self._context.term()

    def _greet(self, sock: zmq.Socket[bytes], runs: dict[bytes, list[tuple[bytes, bytes, bytes]]], viewers: dict[bytes, int]) -> None:
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            viewer = frames[0]
            if frames[1:2] == [BYE]:
                viewers.pop(viewer, None)
                continue
            viewers[viewer] = 0
            self._send(sock, viewers, viewer, (WELCOME, NO_RUN, _pack({"in_flight": len(runs)})))
            for messages in list(runs.values()):
                for message in messages:
                    self._send(sock, viewers, viewer, message)

    def _send(self, sock: zmq.Socket[bytes], viewers: dict[bytes, int], viewer: bytes, message: tuple[bytes, bytes, bytes]) -> None:
        if viewer not in viewers:
            return
        try:
            sock.send_multipart([viewer, *encode(*message, viewers[viewer] + self.dropped)], zmq.NOBLOCK)
        except zmq.Again:
            viewers[viewer] += 1
        except zmq.ZMQError:
            viewers.pop(viewer, None)  # gone


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

        def both(delta: dict[str, Any]) -> None:
            relayed(delta)
            if on_delta is not None:
                on_delta(delta)

        try:
            episode = await self._client.run(client, model, sampling, task_data, on_delta=both)
        except BaseException as error:
            relayed.end(error=error)
            raise
        relayed.end(episode)
        return episode


def _reply(episode: Any, error: BaseException | str | None) -> dict[str, Any]:
    """How a run ended, as its server would have replied; the episode may be a model or a dict."""
    if error is not None or episode is None:
        return failed_reply(error)
    record = episode.model_dump(mode="json") if hasattr(episode, "model_dump") else dict(episode)
    traces = record.pop("traces", None) or []
    return served_reply(record, ((t["id"], len(t["nodes"]), len(t["calls"])) for t in traces))
