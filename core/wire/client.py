"""An async consumer of one env server: one DEALER socket, one receive loop for every
request, each run's deltas handed to whoever keeps its episode as they land (`stream`;
`run` keeps it in an `EpisodeAssembly` of its own).

Runs are untimed (a rollout takes as long as it takes); a caller that gives up on a
run cancels its task, and the server is told to abort it, as verifiers' client does.
A frame that cannot be read is logged, counted and skipped; when it names a run, that
run fails with the reason, since its episode can no longer be trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar

import zmq
import zmq.asyncio

from tracewatch.core.errors import TracewatchError
from tracewatch.core.wire.assembly import AssemblyError, EpisodeAssembly
from tracewatch.core.wire.delta_checks import DeltaValueError, check_nesting
from tracewatch.core.wire.protocol import (
    KIND_DELTA,
    KIND_REPLY,
    CancelRequest,
    CancelResponse,
    ClientConfig,
    HealthRequest,
    MalformedReply,
    RunRequest,
    RunResponse,
    SamplingConfig,
    TraceSummary,
    WireDelta,
    delta_failure,
    is_aborted,
    parse_reply,
    request_payload,
    unpack,
    unpack_delta,
)
from tracewatch.core.wire.run_payload import RunPayloads

logger = logging.getLogger(__name__)
V = TypeVar("V")

CLOSE_LINGER_MS = 500
"""How long closing waits for queued cancels to leave the socket."""

RECEIVE_QUEUE = 1000
"""Frames zmq holds for us before it stops reading the socket: a source ahead of us
keeps its backlog (TCP pushes back; nothing is dropped) instead of growing our memory
by the whole stream."""

BATCH_FRAMES = 256
BATCH_SECONDS = 0.002
"""The receive loop hands the event loop back after this many queued frames or this
long, whichever comes first: pyzmq answers `recv` at once while frames are queued, so
a loop that drains a backlog in one go starves the screen's tick and the keys for as
long as the source keeps ahead of it. A few ms keeps a key's round trip short while
the per-yield overhead stays a small part of each batch."""


_MORE = int(zmq.SNDMORE | zmq.NOBLOCK)
_NOW = int(zmq.NOBLOCK)


class RunFailed(TracewatchError, RuntimeError):
    """The server replied that the run did not succeed."""

    def __init__(self, error: str | None) -> None:
        self.error = error or "env server request failed"
        super().__init__(self.error)

    @property
    def aborted(self) -> bool:
        return is_aborted(self.error)


class ServerGone(TracewatchError, ConnectionError):
    """The run can never get its reply: the server died or the client closed."""


class _Run:
    __slots__ = ("on_delta", "on_frame")

    def __init__(self, on_delta: Callable[[WireDelta], None], on_frame: Callable[[bytes], None] | None) -> None:
        self.on_delta = on_delta
        self.on_frame = on_frame


def _hand_to(consumer: Callable[[V], None] | None, value: V, request_id: str) -> None:
    """A consumer's failure is logged; it never fails the run."""
    if consumer is not None:
        try:
            consumer(value)
        except Exception:
            logger.exception("a delta consumer failed for run %s", request_id)


class EpisodeReply(NamedTuple):
    """A run's successful reply: its episode's head and what each trace streamed."""

    head: dict[str, Any]
    traces: list[TraceSummary]


def new_request_id() -> str:
    return uuid.uuid4().hex


class EnvClient:
    def __init__(self, address: str, on_drop: Callable[[str], None] | None = None) -> None:
        self.address = address
        self.on_drop = on_drop
        """Told why, each time a frame is dropped (unreadable, unknown, or for a run
        it no longer holds)."""
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SNDHWM, 0)
        self._socket.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
        self._socket.connect(address)
        # the same socket, read without a future: how the loop takes what is queued
        self._queued: zmq.Socket[bytes] = zmq.Socket.shadow(self._socket.underlying)
        self._replies: dict[str, asyncio.Future[Any]] = {}
        self._run_payloads = RunPayloads()
        self._wake_pending = False
        self._runs: dict[str, _Run] = {}
        self._cancels: set[asyncio.Task[None]] = set()
        self._asked_to_abort: set[str] = set()
        """Runs the server was asked to abort: each is asked once, however it then ends."""
        self._receiver: asyncio.Task[None] | None = None
        self.last_received = 0.0
        """When (monotonic) a frame last arrived: a server streaming deltas is alive,
        even while its health reply waits behind them in the queue."""
        self._closed = False

    @property
    def in_flight(self) -> list[str]:
        return list(self._runs)

    async def health(self, timeout: float = 2.0) -> bool:
        try:
            reply = await self._request(HealthRequest.method, request_payload(HealthRequest()), timeout=timeout)
        except (TimeoutError, ServerGone, AssemblyError, zmq.ZMQError):
            return False
        return bool(reply.get("success", True))

    async def wait_for_server_startup(
        self,
        timeout: float = 120.0,
        interval: float = 0.25,
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        """Poll `health` until it answers; `on_wait` hears the seconds left after each
        miss, so a caller can show a countdown."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"env server at {self.address} did not answer health within {timeout:g}s"
                )
            if await self.health(timeout=max(0.05, min(2.0, left))):
                return
            left = deadline - time.monotonic()
            if on_wait is not None:
                on_wait(max(0.0, left))
            await asyncio.sleep(max(0.0, min(interval, left)))

    async def run(
        self,
        task_data: dict[str, Any],
        client: ClientConfig | dict[str, Any],
        model: str,
        sampling: SamplingConfig | dict[str, Any] | None = None,
        on_delta: Callable[[WireDelta], None] | None = None,
        *,
        request_id: str | None = None,
        assembly: EpisodeAssembly | None = None,
        on_frame: Callable[[bytes], None] | None = None,
    ) -> dict[str, Any]:
        """Run one rollout and return its episode record (head joined with the
        assembled traces), for a caller that keeps no episode of its own: each delta
        is applied to `assembly` (pass one to read the live traces while it runs),
        then `on_delta` sees it, and if it raises, the run fails. The rest as `stream`."""
        assembly = assembly if assembly is not None else EpisodeAssembly()

        def take(delta: WireDelta) -> None:
            assembly.apply(delta)
            if on_delta is not None:
                on_delta(delta)

        reply = await self.stream(task_data, client, model, sampling, take, request_id=request_id, on_frame=on_frame)
        return assembly.finish(reply.head, reply.traces)

    async def stream(
        self,
        task_data: dict[str, Any],
        client: ClientConfig | dict[str, Any],
        model: str,
        sampling: SamplingConfig | dict[str, Any] | None,
        on_delta: Callable[[WireDelta], None],
        *,
        request_id: str | None = None,
        on_frame: Callable[[bytes], None] | None = None,
    ) -> EpisodeReply:
        """Run one rollout, handing each delta as it was decoded to `on_delta`, which
        applies it where the caller keeps the episode (if it raises, the run fails),
        and return the reply: the episode's head and its traces' sizes, for
        `EpisodeAssembly.finish`. Pass `request_id` (see `new_request_id`) to know the
        wire id before the run starts, so it can be cancelled. `on_frame` gets each
        delta's bytes as they came, before anything interprets them, so a recording
        keeps what a failing run was sent (and a recorder keeps them without packing
        again)."""
        payload = self._run_payloads.payload(task_data, client, model, sampling)
        request_id = request_id or new_request_id()
        self._runs[request_id] = _Run(on_delta, on_frame)
        try:
            reply = await self._request(RunRequest.method, payload, request_id=request_id)
        finally:
            self._runs.pop(request_id, None)
            self._asked_to_abort.discard(request_id)
        response = parse_reply(RunResponse, reply, "run")
        if not response.success:
            raise RunFailed(response.error)
        if response.head is None:
            raise AssemblyError("the server's run reply has no episode head")
        try:
            check_nesting(response.head, "its head")
        except DeltaValueError as error:
            raise MalformedReply(f"the server's run reply is malformed: {error}") from None
        return EpisodeReply(response.head, response.traces)

    async def cancel(self, request_id: str, timeout: float | None = 10.0) -> bool:
        """Ask the server to abort a run; true if it found the run live. A run of ours
        asked this way is not asked again when it is stopped or the client closes."""
        if request_id in self._runs:
            self._asked_to_abort.add(request_id)
        reply = await self._request(
            CancelRequest.method, request_payload(CancelRequest(request_id=request_id)), timeout=timeout
        )
        response = parse_reply(CancelResponse, reply, "cancel")
        if not response.success:
            raise RunFailed(response.error)
        return response.cancelled

    def cancel_soon(self, request_ids: Iterable[str]) -> None:
        """Ask the server to abort these runs without awaiting its answers: a stop of
        thousands of runs waits on their aborted replies instead (each cancel's answer
        queues behind the runs' own deltas: docs/performance.md, `bench/quit.py`)."""
        for request_id in request_ids:
            self._cancel_in_background(request_id)

    def abandon_all(self, reason: str) -> int:
        """Fail every request still waiting, for when the server is known to be gone;
        returns how many runs were failed."""
        runs = 0
        for request_id, future in list(self._replies.items()):
            if not future.done():
                runs += request_id in self._runs
                future.set_exception(ServerGone(reason))
        self._replies.clear()
        return runs

    async def close(self) -> None:
        """Stop every run still waiting on the server (closing leaves it no reader,
        including one cancelled just before, whose task has not run yet), fail its
        caller with ServerGone, and free the socket."""
        if self._closed:
            return
        self._closed = True
        for request_id in self._runs:
            self._cancel_in_background(request_id)
        cancels = bool(self._cancels)
        # let fire-and-forget cancels reach the socket, or an abandoned run goes on
        while self._cancels:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._cancels.pop()
        if self._receiver is not None:
            self._receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._receiver
            self._receiver = None
        self.abandon_all("the client was closed")
        # A sent frame is only queued; closing with no linger would drop the cancels.
        # Bounded: a dead server costs at most this, and only when cancels are queued.
        self._socket.close(linger=CLOSE_LINGER_MS if cancels else 0)
        self._context.term()

    async def _request(
        self, method: str, payload: bytes, *, timeout: float | None = None, request_id: str | None = None
    ) -> dict[str, Any]:
        if self._closed:
            raise ServerGone("the client is closed")
        if self._receiver is None:
            self._receiver = asyncio.get_running_loop().create_task(self._receive_loop())
        request_id = request_id or new_request_id()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._replies[request_id] = future
        try:
            frames = [request_id.encode(), method.encode(), payload]
            if not self._send(frames):
                await self._socket.send_multipart(frames)
            return await asyncio.wait_for(future, timeout)
        except asyncio.CancelledError:
            if method == RunRequest.method and not self._closed:
                self._cancel_in_background(request_id)
            raise
        finally:
            self._replies.pop(request_id, None)

    def _send(self, frames: list[bytes]) -> bool:
        """Send now if the socket takes it without waiting (it always does while the
        server is connected: nothing bounds what is queued to it); false if not.

        pyzmq's awaited send asks the socket's events after each send, so that a
        receive waiting on its edge-triggered descriptor is not left asleep by the
        send having taken the edge: for thousands of runs started at once that was
        much of each start. Here one look per turn of the loop does it."""
        try:
            for frame in frames[:-1]:  # send_multipart's flag arithmetic costs more than these sends
                self._queued.send(frame, _MORE)
            self._queued.send(frames[-1], _NOW)  # a message's first part taken, zmq takes the rest
        except zmq.Again:
            return False
        if not self._wake_pending:
            self._wake_pending = True
            asyncio.get_running_loop().call_soon(self._wake_receiver)
        return True

    def _wake_receiver(self) -> None:
        self._wake_pending = False
        if not self._closed:
            self._socket.get(zmq.EVENTS)  # the async socket schedules a waiting receive if anything is queued

    def _cancel_in_background(self, request_id: str) -> None:
        if request_id in self._asked_to_abort:
            return
        self._asked_to_abort.add(request_id)

        async def send() -> None:
            with contextlib.suppress(Exception):
                await self._socket.send_multipart(
                    [
                        new_request_id().encode(),
                        CancelRequest.method.encode(),
                        request_payload(CancelRequest(request_id=request_id)),
                    ]
                )

        task = asyncio.get_running_loop().create_task(send())
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    async def _receive_loop(self) -> None:
        queued = self._queued
        while True:
            try:
                frames = await self._socket.recv_multipart()
                # Take what else is queued, bounded, then yield so the loop's other
                # tasks (a UI's tick, its keys, its compositor) get their turn.
                self.last_received = time.monotonic()
                deadline = self.last_received + BATCH_SECONDS
                handled = 0
                while True:
                    self._handle(frames)
                    handled += 1
                    if handled >= BATCH_FRAMES or time.monotonic() >= deadline:
                        break
                    try:
                        frames = queued.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                await asyncio.sleep(0)
            except (zmq.ZMQError, asyncio.CancelledError) as error:
                if self._closed:
                    raise
                # the socket went away under us: nothing waiting on it can be answered
                reason = f"the connection to {self.address} failed: {error!r}"
                logger.error("env server %s: %s", self.address, reason)
                self.abandon_all(reason)
                return

    def _handle(self, frames: list[bytes]) -> None:
        try:
            self._dispatch(frames)
        except Exception as error:  # one bad frame must not stop every other run
            self._drop(f"unexpected error handling a frame: {error!r}")

    def _dispatch(self, frames: list[bytes]) -> None:
        if len(frames) != 3:
            self._drop(
                f"expected [request_id, kind, data], got {len(frames)} frames: "
                "is this server speaking verifiers' serve protocol?"
            )
            return
        raw_id, kind, data = frames
        try:
            request_id = raw_id.decode()
        except UnicodeDecodeError:
            self._drop(f"request id is not text: {raw_id[:40]!r}")
            return
        if kind == KIND_DELTA:
            run = self._runs.get(request_id)
            if run is not None:
                self._deliver_delta(request_id, run, data)
            return
        if kind != KIND_REPLY:
            self._drop(f"unknown frame kind {kind[:40]!r} for request {request_id}")
            return
        future = self._replies.get(request_id)
        if future is None or future.done():
            return
        # the run ends at its reply: a delta after it is no longer the run's, and was
        # recorded before the reply and replayed into it (a run done live failed in replay)
        self._runs.pop(request_id, None)
        try:
            reply = unpack(data)
        except Exception as error:
            self._fail(request_id, f"the reply could not be decoded ({error})")
            return
        if not isinstance(reply, dict):
            self._fail(request_id, f"the reply is a {type(reply).__name__}, not a map")
            return
        future.set_result(reply)

    def _deliver_delta(self, request_id: str, run: _Run, data: bytes) -> None:
        try:
            delta = unpack_delta(data)
        except Exception as error:
            self._fail(request_id, f"a delta could not be applied: it is not readable msgpack ({error})")
            return
        _hand_to(run.on_frame, data, request_id)  # recorded as it came, before anything may reject it
        try:
            run.on_delta(delta)
        except Exception as error:
            self._fail_with(request_id, delta_failure(request_id, error))

    def _fail(self, request_id: str, reason: str) -> None:
        self._fail_with(request_id, f"request {request_id}: {reason}")

    def _fail_with(self, request_id: str, message: str) -> None:
        """A request whose stream broke: fail it here and, if it is a run, stop it on
        the server."""
        self._drop(message)
        future = self._replies.get(request_id)
        if future is not None and not future.done():
            future.set_exception(AssemblyError(message))
        if self._runs.pop(request_id, None) is not None:
            self._cancel_in_background(request_id)

    def _drop(self, reason: str) -> None:
        logger.warning("env server %s: dropped a frame: %s", self.address, reason)
        if self.on_drop is not None:
            self.on_drop(reason)
