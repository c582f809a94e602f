"""A ROUTER that answers `health`, `run` and `cancel` frame for frame as verifiers
0.4.0's `EnvServer` does, playing demo rollouts instead of hosting an environment.

In: `[client_id, request_id, method, payload]`. Out: `[client_id, request_id, kind,
data]`, zero or more `delta` frames per run, then exactly one `reply`. A bad request
gets a failed reply, a frame of the wrong shape is logged and skipped; nothing a
client sends stops the server.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

import zmq
import zmq.asyncio

from tracewatch.core.demo.agent import Pace
from tracewatch.core.demo.scenarios import Run, play
from tracewatch.core.demo.streamer import DeltaStreamer
from tracewatch.core.demo.tasks import parse
from tracewatch.core.demo.trace import LiveEpisode
from tracewatch.core.wire.protocol import (
    ABORTED_ERROR,
    KIND_DELTA,
    KIND_REPLY,
    CancelRequest,
    CancelResponse,
    HealthResponse,
    Response,
    RunRequest,
    RunResponse,
    TraceSummary,
    pack,
    unpack,
)

logger = logging.getLogger(__name__)

ENV_ID = "tracewatch-demo"


def _decode(payload: bytes) -> object:
    try:
        return unpack(payload)
    except Exception as e:  # msgpack's own messages can be empty
        raise ValueError(f"the payload is not valid msgpack ({type(e).__name__}: {e})") from None


class DemoServer:
    def __init__(self, address: str, *, speed: float = 1.0, seed: int = 0) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self.speed = speed
        self.seed = seed
        self._running: dict[str, asyncio.Task[None]] = {}
        self._context = zmq.asyncio.Context()
        self.socket = self._context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.socket.setsockopt(zmq.SNDHWM, 0)
        self.socket.setsockopt(zmq.RCVHWM, 0)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(address)
        # with a `:0` port, this is how the caller learns the real one
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)

    async def serve(self) -> None:
        """Dispatch frames until cancelled; then abort every run and close."""
        logger.info("demo env server up: %s (speed %g, seed %d)", self.address, self.speed, self.seed)
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                frames = await self.socket.recv_multipart()
                if len(frames) != 4:
                    logger.warning("invalid message: expected 4 frames, got %d; skipped", len(frames))
                    continue
                client_id, request_id, method, payload = frames
                task = asyncio.get_running_loop().create_task(self._handle(client_id, request_id, method, payload))
                if method == b"run":
                    # registered at dispatch, so a cancel right behind the run finds it
                    self._running[request_id.decode(errors="replace")] = task
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.socket.close(linger=0)
            self._context.term()

    async def _handle(self, client_id: bytes, request_id: bytes, method: bytes, payload: bytes) -> None:
        rid = request_id.decode(errors="replace")
        try:
            route = method.decode(errors="replace")
            raw = _decode(payload)
            if route == "health":
                response: Response = HealthResponse()
            elif route == "run":
                try:
                    response = await self._run(RunRequest.model_validate(raw), client_id, request_id)
                finally:
                    self._running.pop(rid, None)
            elif route == "cancel":
                target = CancelRequest.model_validate(raw).request_id
                running = self._running.get(target)
                if running is not None:
                    running.cancel()
                    logger.info("cancelled run %s on client request", target)
                response = CancelResponse(cancelled=running is not None)
            else:
                response = Response(success=False, error=f"unknown method {route!r}")
        except asyncio.CancelledError:
            # an aborted run still replies, so the client's accounting stays exact
            response = Response(success=False, error=ABORTED_ERROR)
        except Exception as e:  # noqa: BLE001 - a failed request is data, not a crash
            logger.warning("request %s failed: %s: %s", rid, type(e).__name__, e)
            response = Response(success=False, error=f"{type(e).__name__}: {e}")
        try:
            await self.socket.send_multipart([client_id, request_id, KIND_REPLY, pack(response.model_dump())])
        except zmq.ZMQError as e:
            logger.warning("failed to send the reply to %s: %s", rid, e)

    async def _run(self, request: RunRequest, client_id: bytes, request_id: bytes) -> RunResponse:
        task = parse(request.task_data)
        rng = random.Random(f"{self.seed}:{task.key}")
        episode = LiveEpisode(task.record, ENV_ID)

        async def send(data: bytes) -> None:
            await self.socket.send_multipart([client_id, request_id, KIND_DELTA, data])

        started = time.monotonic()
        logger.info("run %s: %s (%s)", request_id.decode(errors="replace"), task.key, task.scenario)
        async with DeltaStreamer(lambda: episode.traces, send) as streamer:
            speed = None if task.scenario == "scale" else self.speed
            await play(
                Run(
                    task=task,
                    episode=episode,
                    pace=Pace(rng, speed, streamer.drain),
                    rng=rng,
                    watch=streamer.watch,
                    model=request.model,
                    client=request.client.model_dump(mode="json"),
                    sampling=request.sampling.model_dump(mode="json"),
                )
            )
        head = episode.head()
        logger.info(
            "run %s: done in %.1fs, ok=%s", request_id.decode(errors="replace"), time.monotonic() - started, head["ok"]
        )
        return RunResponse(head=head, traces=[TraceSummary(**trace.summary()) for trace in episode.traces])
