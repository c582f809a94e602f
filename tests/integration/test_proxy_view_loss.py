"""When the proxy's view loses copies (it falls behind and the forwarder drops them
rather than slow the driver), a run the driver completed is shown and recorded as
*view incomplete* with what the view saw, as its reply says it ended: never as a
failure of the server. Real parts: a forwarding process with a small copy queue, a
scripted env server sending verifiers 0.4.0's recorded stream, verifiers' own
EnvClient driving, and the app's loop held while the burst goes by."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
import zmq
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient as VerifiersClient
from verifiers.v1.types import SamplingConfig

from core.engine.live import Engine
from core.engine.opened import OpenedRecording
from core.ports import free_address
from core.recordings.recorder import Recorder
from core.session.config import Config
from core.session.contracts import VariantState
from core.session.store import Status
from core.taps.proxy_variant import ProxyVariant
from core.wire.protocol import pack
from tests.support.polling import eventually, wait_until
from tests.support.repo import FIXTURE

WAIT = 60.0
RUNS = 4
FILLERS = 30
"""64 kB deltas per run between its first deltas and the rest: far more than the
view's queue holds while the app's loop is held."""


def recorded_run() -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in (FIXTURE / "deltas.jsonl").read_text().splitlines()]
    deltas = [row["delta"] for row in rows if row["request"] == "run0"]
    reply = next(r["reply"] for r in json.loads((FIXTURE / "replies.json").read_text()) if r["request"] == "run0")
    return deltas, reply


class HeldServer:
    """An env server that answers every run, once told, with the first deltas of the
    recorded run and a burst of fillers, and once released with the rest and the reply."""

    def __init__(self) -> None:
        self.deltas, self.reply = recorded_run()
        trace = self.deltas[0]["trace"]
        filler = {"trace": trace, "pending": [{"role": "tool", "content": "x" * 65536}]}
        self.first = [*map(pack, self.deltas[:3]), *[pack(filler)] * FILLERS, pack(self.deltas[3])]
        self.rest = [*map(pack, self.deltas[4:])]
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        for option in (zmq.SNDHWM, zmq.RCVHWM, zmq.LINGER):
            self.router.setsockopt(option, 0)
        self.address = f"tcp://127.0.0.1:{self.router.bind_to_random_port('tcp://127.0.0.1')}"
        self.runs: list[tuple[bytes, bytes]] = []
        self.burst = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        steps = [(self.burst, self.first, False), (self.release, self.rest, True)]
        while not self.done.is_set():
            if self.router.poll(20):
                peer, request_id, method, _ = self.router.recv_multipart()
                if method == b"run":
                    self.runs.append((peer, request_id))
                else:
                    self.router.send_multipart([peer, request_id, b"reply", pack({"success": True})])
            if steps and steps[0][0].is_set():
                _, deltas, reply = steps.pop(0)
                for peer, request_id in self.runs:
                    for delta in deltas:
                        self.router.send_multipart([peer, request_id, b"delta", delta])
                    if reply:
                        self.router.send_multipart([peer, request_id, b"reply", pack(self.reply)])
        self.router.close()
        self.context.term()


@pytest.fixture
def server():
    held = HeldServer()
    yield held
    held.done.set()
    held.thread.join(WAIT)


async def test_a_run_whose_view_lost_copies_is_view_incomplete_as_its_reply_says_never_a_server_failure(server, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ProxyVariant, "copy_queue", 2)
    recording = tmp_path / "loss.twrec"
    engine = Engine(Config.for_proxy(free_address(), server.address, "px"), recorder=Recorder(recording, meta={}), session_dir=tmp_path / "s")
    await engine.start()
    variant = engine.variants["px"]
    assert isinstance(variant, ProxyVariant)
    await eventually(lambda: variant.state is VariantState.RUNNING, WAIT, "the proxy up")
    streamed: dict[int, int] = {}
    episodes: list = []

    async def drive() -> None:
        client = VerifiersClient(variant.listen)
        try:
            await client.wait_for_server_startup(timeout=WAIT, interval=0.1)
            config = SamplingConfig(temperature=0.3, max_tokens=512)

            def counting(i: int):
                return lambda _delta: streamed.__setitem__(i, streamed.get(i, 0) + 1)

            runs = (client.run(EvalClientConfig(), "m", config, {"id": f"t{i}"}, counting(i)) for i in range(RUNS))
            episodes.extend(await asyncio.wait_for(asyncio.gather(*runs), WAIT))
        finally:
            await client.close()

    driver = threading.Thread(target=asyncio.run, args=(drive(),))
    driver.start()
    try:
        await eventually(lambda: len(engine.store.rollouts) == RUNS == len(server.runs), WAIT, "every run begun in the view")
        server.burst.set()
        # the app's loop held (a view far behind) while the burst reaches the driver
        wait_until(lambda: len(streamed) == RUNS and all(n == len(server.first) for n in streamed.values()), WAIT, "the burst at the driver")
        await eventually(lambda: variant.forwarder.dropped > 0, WAIT, "the view's copies dropped")
        server.release.set()
        await asyncio.to_thread(driver.join, WAIT)
        assert len(episodes) == RUNS and all(e.traces[0].nodes for e in episodes), "the driver got every run whole"
        rollouts = await eventually(
            lambda: (r := list(engine.store.variant_rollouts("px"))) and all(x.status.finished for x in r) and r, WAIT, "every run ended in the view"
        )
    finally:
        server.release.set()
        await engine.shutdown()
    for rollout in rollouts:
        assert rollout.status is Status.DONE, rollout.reason
        assert rollout.reason is not None and rollout.reason.startswith("view incomplete: saw "), rollout.reason
        assert "the server reports" not in rollout.reason and "the run itself ended done" in rollout.reason
    assert engine.store.stats("px").counts.get(Status.FAILED, 0) == 0
    replayed = {r.key: r.ending for r in OpenedRecording(recording).store.rollouts.values()}
    assert replayed == {r.key: r.ending for r in rollouts}, "the recording says the same"
