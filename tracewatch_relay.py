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
msgpack only, and is named so that it cannot clash with a project's own `core`.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable
from typing import Any

import msgpack
import zmq

QUEUE = 100_000
"""Messages the caller may be ahead of the relay thread before new ones are dropped."""
VIEWER_QUEUE = 100_000
"""Messages a slow viewer may fall behind by before its own are dropped."""
POLL_MS = 2


def _pack(payload: Any) -> bytes:
    return msgpack.packb(payload, use_bin_type=True, default=_fallback)


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

    def __call__(self, delta: dict) -> None:
        self._relay._offer(b"delta", self.run, delta)

    def end(self, episode: Any = None, *, error: BaseException | str | None = None) -> None:
        self._relay._offer(b"reply", self.run, _reply(episode, error))


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
        self._offer(b"begin", run, {"task_data": task_data, "model": model, "sampling": sampling})
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
        runs: dict[bytes, list[list[bytes]]] = {}
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
                        message = [kind, run, _pack(payload)]
                    except Exception as error:
                        message = [b"reply", run, _pack({"success": False, "error": f"the relay could not pack a {kind.decode()}: {error!r}"})]
                    if message[0] == b"reply":
                        runs.pop(run, None)
                    else:
                        runs.setdefault(run, []).append(message)
                    for viewer in list(viewers):
                        self._send(sock, viewers, viewer, message)
        finally:
            sock.close(linger=0)
            self._context.term()

    def _greet(self, sock: zmq.Socket, runs: dict, viewers: dict) -> None:
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            viewer = frames[0]
            if frames[1:2] == [b"bye"]:
                viewers.pop(viewer, None)
                continue
            viewers[viewer] = 0
            self._send(sock, viewers, viewer, [b"welcome", b"", _pack({"in_flight": len(runs)})])
            for messages in list(runs.values()):
                for message in messages:
                    self._send(sock, viewers, viewer, message)

    def _send(self, sock: zmq.Socket, viewers: dict, viewer: bytes, message: list[bytes]) -> None:
        if viewer not in viewers:
            return
        try:
            sock.send_multipart([viewer, *message, str(viewers[viewer] + self.dropped).encode()], zmq.NOBLOCK)
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

    async def run(self, client: Any, model: str, sampling: Any, task_data: dict, on_delta: Callable[[dict], None] | None = None) -> Any:
        relayed = self.relay.begin(task_data, model=model, sampling=sampling)

        def both(delta: dict) -> None:
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


def _reply(episode: Any, error: BaseException | str | None) -> dict:
    """A served-style reply: the episode without its traces and their sizes."""
    if error is not None or episode is None:
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}" if error else "the run ended without an episode"
        if type(error).__name__ in ("CancelledError", "KeyboardInterrupt"):
            text = "Cancelled: rollout aborted"
        return {"success": False, "error": text}
    record = episode.model_dump(mode="json") if hasattr(episode, "model_dump") else dict(episode)
    traces = record.pop("traces", None) or []
    return {
        "success": True,
        "error": None,
        "head": record,
        "traces": [{"id": t["id"], "nodes": len(t["nodes"]), "calls": len(t["calls"])} for t in traces],
    }
