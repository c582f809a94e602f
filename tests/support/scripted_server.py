"""An env server the test plays: a real ROUTER on 127.0.0.1 that answers health and,
for each run, plays the script its task names (deltas, raw frames, a reply, or
silence), so an engine meets hostile, broken or dying servers on a real socket."""

from __future__ import annotations

import asyncio
import contextlib
import io
from pathlib import Path
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from tracewatch.core.engine.headless import run_headless
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.replay import ReplaySession
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.config import Config, build_config
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.wire.protocol import ABORTED_ERROR

DEADLINE = 30.0
"""A run that has not ended by then never would."""

Step = tuple[str, Any]
"""("delta", value) and ("reply", value) send one frame of that kind (value packed
unless it is bytes); ("frames", [bytes, ...]) sends those frames after the client's
routing id, verbatim. A script that ends without a reply leaves its run hanging."""

OK = {"success": True, "error": None}


def pack(value: Any) -> bytes:
    return value if isinstance(value, bytes) else msgpack.packb(value, use_bin_type=True)


class ScriptedServer:
    def __init__(self, scripts: dict[str, list[Step]]) -> None:
        self.scripts = scripts
        self.healthy = True
        """False: health requests go unanswered, as a dead or stopped server's do."""
        self.cancel_reply: Any = {**OK, "cancelled": True}
        """What a cancel is answered with (None: nothing)."""
        self.abort_on_cancel = True
        """Whether a cancelled run that has not replied then gets verifiers' aborted reply."""
        self.on_cancel: list[Step] = []
        """What a cancelled run that has not replied plays before its aborted reply (a
        delta the server had in flight when the cancel came)."""
        self.runs: list[str] = []
        """Task ids of the runs requested, in order."""
        self.cancels: list[str] = []
        self.context = zmq.asyncio.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind("tcp://127.0.0.1:0")
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._players: dict[bytes, asyncio.Task] = {}
        self._replied: set[bytes] = set()
        self._serving: asyncio.Task | None = None

    async def __aenter__(self) -> ScriptedServer:
        self._serving = asyncio.get_running_loop().create_task(self._serve())
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in [self._serving, *self._players.values()]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self.socket.close(linger=0)
        self.context.term()

    async def _serve(self) -> None:
        while True:
            frames = await self.socket.recv_multipart()
            if len(frames) != 4:
                continue
            client, request_id, method, payload = frames
            body = msgpack.unpackb(payload, raw=False)
            if method == b"health":
                if self.healthy:
                    await self._send(client, request_id, "reply", OK)
            elif method == b"run":
                task_id = str(body["task_data"].get("id"))
                self.runs.append(task_id)
                player = self._play(client, request_id, self.scripts.get(task_id, []))
                self._players[request_id] = asyncio.get_running_loop().create_task(player)
            elif method == b"cancel":
                target = str(body["request_id"]).encode()
                self.cancels.append(target.decode())
                if self.cancel_reply is not None:
                    await self._send(client, request_id, "reply", self.cancel_reply)
                player = self._players.get(target)
                if self.abort_on_cancel and player is not None and target not in self._replied:
                    player.cancel()
                    for kind, value in self.on_cancel:
                        await self._send(client, target, kind, value)
                    await self._send(client, target, "reply", {"success": False, "error": ABORTED_ERROR})

    async def _play(self, client: bytes, request_id: bytes, script: list[Step]) -> None:
        for kind, value in script:
            if kind == "frames":
                await self.socket.send_multipart([client, *value])
            else:
                await self._send(client, request_id, kind, value)
            await asyncio.sleep(0)

    async def _send(self, client: bytes, request_id: bytes, kind: str, value: Any) -> None:
        if kind == "reply":
            self._replied.add(request_id)
        await self.socket.send_multipart([client, request_id, kind.encode(), pack(value)])


def attached(address: str, task_ids: list[str], base_dir: Path, **settings: Any) -> Config:
    """A config of one variant, "remote", attached to `address` with those tasks."""
    variant = {"name": "remote", "attach": address, "tasks": [{"id": t} for t in task_ids], "model": "m", **settings}
    return build_config({"variants": [variant]}, "test", base_dir)


def header(trace: str) -> dict:
    return {"version": 1, "id": trace, "verifiers": {"version": "0.4.0", "commit": None}, "task": {"type": "T"}}


def good_run(trace: str = "t", turns: int = 2) -> list[Step]:
    """A short well-formed rollout: an opening, `turns` user/assistant pairs, the reply."""
    steps: list[Step] = [("delta", {"trace": trace, "open": header(trace), "set": {"ok": None}})]
    for turn in range(turns):
        user = {"parent": 2 * turn - 1 if turn else None, "semantic_parents": [], "message": {"role": "user", "content": f"q{turn}"}}
        answer = {"parent": 2 * turn, "semantic_parents": [], "sampled": True, "message": {"role": "assistant", "content": f"a{turn}"}}
        steps.append(("delta", {"trace": trace, "nodes": [user, answer], "calls": [{"node": 2 * turn + 1}]}))
    steps.append(("delta", {"trace": trace, "set": {"ok": True, "rewards": {"r": {"score": 1.0, "weight": 1.0}}, "num_total_tokens": 10}}))
    reply = {**OK, "head": {"id": f"episode-{trace}", "ok": True}, "traces": [{"id": trace, "nodes": 2 * turns, "calls": turns}]}
    steps.append(("reply", reply))
    return steps


async def run_live(
    tmp_path: Path, server: ScriptedServer, tasks: list[str], cancel_stalled: float | None = None, **settings: Any
) -> tuple[LiveSession, int, str]:
    """A headless run of one variant attached to `server`, recorded to live.twrec:
    the engine, the exit code and what it printed."""
    recorder = Recorder(tmp_path / "live.twrec")
    engine = LiveSession(attached(server.address, tasks, tmp_path, **settings), recorder=recorder, session_dir=tmp_path / "session")
    out = io.StringIO()
    code = await asyncio.wait_for(run_headless(engine, out, cancel_stalled=cancel_stalled), DEADLINE)
    return engine, code, out.getvalue()


async def replay(path: Path) -> ReplaySession:
    """The recording replayed as fast as it goes, to its end."""
    session = ReplaySession(path, speed=0)
    await session.start()
    await asyncio.wait_for(session.wait(), DEADLINE)
    return session


def endings(store: RolloutStore) -> dict[str, tuple[Status, str | None]]:
    return {key: (r.status, r.reason) for key, r in store.rollouts.items()}
