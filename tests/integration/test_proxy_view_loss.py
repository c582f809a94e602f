"""When the proxy's view loses copies (it falls behind and the forwarder drops them
rather than slow the driver), a run the driver completed is shown and recorded as
*view incomplete* with what the view saw, as its reply says it ended: never as a
failure of the server. Real parts: a forwarding process with a small copy queue, a
scripted env server sending verifiers 0.4.0's recorded stream, verifiers' own
EnvClient driving, and the app's loop held while the burst goes by. Only the runs
whose copies were lost are incomplete, and the summary says how many are whole."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import zmq
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient as VerifiersClient
from verifiers.v1.types import SamplingConfig

from tests.support.polling import children, eventually, pid_gone, wait_until
from tests.support.repo import FIXTURE
from tests.support.tether import TetheredProcess
from tracewatch.core.engine.headless import summary_lines
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.ports import free_address
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.config import Config
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.status import Status
from tracewatch.core.taps.proxy_variant import ProxyVariant
from tracewatch.core.wire.protocol import pack, unpack

WAIT = 60.0
RUNS = 4
FILLERS = 30
"""64 kB deltas per run between its first deltas and the rest: far more than the
view's queue holds while the app's loop is held."""
COPY_BYTES = 8 * 65536
"""Bytes of copies the view may fall behind by: room for the run requests before the
burst, none for the burst."""
LONG_TASK = 200_000
"""Bytes of a long task's document, which its reply's head carries."""
RESUMED_WITHIN = 20.0
"""How soon a resumed view ends the runs that ended while it was stopped: a few
seconds, with room for a loaded machine."""


def recorded_run() -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in (FIXTURE / "deltas.jsonl").read_text().splitlines()]
    deltas = [row["delta"] for row in rows if row["request"] == "run0"]
    reply = next(r["reply"] for r in json.loads((FIXTURE / "replies.json").read_text()) if r["request"] == "run0")
    return deltas, reply


class HeldServer:
    """An env server that sends the recorded run's deltas (and fillers) to the runs
    it holds only when told, so a test decides what goes by while the view is held."""

    def __init__(self) -> None:
        self.deltas, reply = recorded_run()
        trace = self.deltas[0]["trace"]
        self.filler = pack({"trace": trace, "pending": [{"role": "tool", "content": "x" * 65536}]})
        self.reply = pack(reply)
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        for option in (zmq.SNDHWM, zmq.RCVHWM, zmq.LINGER):
            self.router.setsockopt(option, 0)
        self.address = f"tcp://127.0.0.1:{self.router.bind_to_random_port('tcp://127.0.0.1')}"
        self.runs: dict[str, tuple[bytes, bytes]] = {}
        """Task id -> the driver's peer and the run's request id."""
        self.orders: queue.Queue[tuple[Callable[[str], bool], list[bytes], bool | bytes]] = queue.Queue()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def send(self, runs: Callable[[str], bool], deltas: list[bytes], reply: bool | bytes = False) -> None:
        """To the runs whose task id `runs` picks: these deltas, then the reply (this
        one, if given)."""
        self.orders.put((runs, deltas, reply))

    def long_reply(self) -> bytes:
        """The recorded run's reply for a task that carries a long document (a reply's
        head carries its task's data): far more than a full copy bound has room for."""
        reply = unpack(self.reply)
        reply["head"]["task"]["data"]["prompt"] = "x" * LONG_TASK
        return pack(reply)

    def _serve(self) -> None:
        while not self.done.is_set():
            if self.router.poll(20):
                peer, request_id, method, payload = self.router.recv_multipart()
                if method == b"run":
                    self.runs[unpack(payload)["task_data"]["id"]] = (peer, request_id)
                else:
                    self.router.send_multipart([peer, request_id, b"reply", pack({"success": True})])
            while not self.orders.empty():
                picked, deltas, reply = self.orders.get()
                for task_id, (peer, request_id) in self.runs.items():
                    if not picked(task_id):
                        continue
                    for delta in deltas:
                        self.router.send_multipart([peer, request_id, b"delta", delta])
                    if reply:
                        self.router.send_multipart([peer, request_id, b"reply", self.reply if reply is True else reply])
        self.router.close()
        self.context.term()


@pytest.fixture
def server():
    held = HeldServer()
    yield held
    held.done.set()
    held.thread.join(WAIT)


class Driven:
    """verifiers' EnvClient running one run per task id, on a thread of its own (the
    test's loop is the app's, and is held at times)."""

    def __init__(self, listen: str, task_ids: list[str]) -> None:
        self.streamed: dict[str, int] = dict.fromkeys(task_ids, 0)
        self.episodes: list = []
        self.thread = threading.Thread(target=asyncio.run, args=(self._drive(listen, task_ids),))
        self.thread.start()

    async def _drive(self, listen: str, task_ids: list[str]) -> None:
        client = VerifiersClient(listen)
        try:
            await client.wait_for_server_startup(timeout=WAIT, interval=0.1)
            config = SamplingConfig(temperature=0.3, max_tokens=512)

            def counting(task_id: str):
                return lambda _delta: self.streamed.__setitem__(task_id, self.streamed[task_id] + 1)

            runs = (client.run(EvalClientConfig(), "m", config, {"id": t}, counting(t)) for t in task_ids)
            self.episodes.extend(await asyncio.wait_for(asyncio.gather(*runs), WAIT))
        finally:
            await client.close()

    def at_driver(self, counts: dict[str, int]) -> bool:
        return all(self.streamed[task_id] >= count for task_id, count in counts.items())


async def proxy(server: HeldServer, tmp_path, recording) -> tuple[LiveSession, ProxyVariant]:
    engine = LiveSession(Config.for_proxy(free_address(), server.address, "px"), recorder=Recorder(recording, meta={}), session_dir=tmp_path / "s")
    await engine.start()
    variant = engine.variants["px"]
    assert isinstance(variant, ProxyVariant)
    await eventually(lambda: variant.state is VariantState.RUNNING, WAIT, "the proxy up")
    # the forwarder's word on the upstream came through: its copies reach the view
    await eventually(lambda: variant.forwarder.upstream_ok, WAIT, "the copies' channel up")
    return engine, variant


async def test_a_run_whose_view_lost_copies_is_view_incomplete_as_its_reply_says_never_a_server_failure(server, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ProxyVariant, "copy_bytes", COPY_BYTES)
    recording = tmp_path / "loss.twrec"
    engine, variant = await proxy(server, tmp_path, recording)
    tasks = [f"t{i}" for i in range(RUNS)]
    first = [*map(pack, server.deltas[:3]), *[server.filler] * FILLERS, pack(server.deltas[3])]
    driver = Driven(variant.listen, tasks)
    try:
        await eventually(lambda: len(engine.store.rollouts) == RUNS == len(server.runs), WAIT, "every run begun in the view")
        server.send(lambda _: True, first)
        # the app's loop held (a view far behind) while the burst reaches the driver
        wait_until(lambda: driver.at_driver(dict.fromkeys(tasks, len(first))), WAIT, "the burst at the driver")
        await eventually(lambda: variant.forwarder.dropped > 0, WAIT, "the view's copies dropped")
        server.send(lambda _: True, [*map(pack, server.deltas[4:])], reply=True)
        await asyncio.to_thread(driver.thread.join, WAIT)
        assert len(driver.episodes) == RUNS and all(e.traces[0].nodes for e in driver.episodes), "the driver got every run whole"
        rollouts = await eventually(
            lambda: (r := list(engine.store.variant_rollouts("px"))) and all(x.status.finished for x in r) and r, WAIT, "every run ended in the view"
        )
    finally:
        await engine.shutdown()
    for rollout in rollouts:
        assert rollout.status is Status.DONE, rollout.reason
        assert rollout.reason is not None and rollout.reason.startswith("view incomplete: saw "), rollout.reason
        assert "the server reports" not in rollout.reason and "the run itself ended done" in rollout.reason
    assert engine.store.stats("px").counts.get(Status.FAILED, 0) == 0
    replayed = {r.key: r.ending for r in OpenedRecording(recording).store.rollouts.values()}
    assert replayed == {r.key: r.ending for r in rollouts}, "the recording says the same"


async def burst(server: Any, engine: Any, driver: Driven, bursting: list[str], early: list[bytes]) -> None:
    """Every run begun and past its first turn in the view, then a burst of fillers for
    `bursting` at the driver while the app's loop is held (a view far behind)."""
    await eventually(lambda: len(engine.store.rollouts) == 2 * RUNS == len(server.runs), WAIT, "every run begun in the view")
    server.send(lambda _: True, early)
    await eventually(lambda: all(r.turns for r in engine.store.rollouts.values()), WAIT, "every run's first turn in the view")
    server.send(lambda task_id: task_id in bursting, [server.filler] * FILLERS)
    wait_until(lambda: driver.at_driver(dict.fromkeys(bursting, len(early) + FILLERS)), WAIT, "the burst at the driver")


def assert_whole_and_incomplete(engine: Any, rollouts: list[Any], whole: list[str], incomplete: list[str]) -> None:
    """The `whole` runs done and clean, the `incomplete` done and marked so, and the
    summary counting them."""
    by_task = {r.task_data["id"]: r for r in rollouts}
    for task_id in whole:
        assert by_task[task_id].status is Status.DONE and by_task[task_id].reason is None, by_task[task_id].reason
    for task_id in incomplete:
        assert by_task[task_id].status is Status.DONE and (by_task[task_id].reason or "").startswith("view incomplete: "), by_task[task_id].reason
    (line,) = [line for line in summary_lines(engine) if line.startswith("px:")]
    assert f"{len(whole)} of {len(whole) + len(incomplete)} runs seen whole ({len(incomplete)} view incomplete)" in line, line


async def test_a_burst_that_drops_copies_leaves_the_runs_it_did_not_touch_whole_and_the_summary_counts_them(server, tmp_path, monkeypatch) -> None:
    """Of one driver's runs, only those whose copies were dropped are incomplete:
    the others, on the same connection, stay whole; the summary says how many."""
    monkeypatch.setattr(ProxyVariant, "copy_bytes", COPY_BYTES)
    engine, variant = await proxy(server, tmp_path, tmp_path / "burst.twrec")
    quiet, bursting = [f"q{i}" for i in range(RUNS)], [f"b{i}" for i in range(RUNS)]
    driver = Driven(variant.listen, quiet + bursting)
    early = [*map(pack, server.deltas[:4])]
    try:
        await burst(server, engine, driver, bursting, early)
        await eventually(lambda: variant.forwarder.dropped > 0, WAIT, "the view's copies dropped")
        server.send(lambda _: True, [*map(pack, server.deltas[4:])], reply=True)
        await asyncio.to_thread(driver.thread.join, WAIT)
        assert len(driver.episodes) == 2 * RUNS
        rollouts = await eventually(
            lambda: (r := list(engine.store.variant_rollouts("px"))) and all(x.status.finished for x in r) and r, WAIT, "every run ended in the view"
        )
    finally:
        await engine.shutdown()
    assert_whole_and_incomplete(engine, rollouts, quiet, bursting)


async def test_a_stop_leaves_the_runs_the_view_did_not_see_end_unobserved_never_failed(server, tmp_path) -> None:
    """Stopping the proxy is stopping a viewer: the runs whose reply the view has not
    read (in flight, or their reply among the copies left unread) are unobserved, not
    counted as failed in the summary, whose counts are what the view knows."""
    engine, variant = await proxy(server, tmp_path, tmp_path / "stop.twrec")
    context = zmq.Context()
    driver = context.socket(zmq.DEALER)  # a driver that sends runs and never waits for them
    driver.setsockopt(zmq.LINGER, 0)
    driver.connect(variant.listen)
    try:
        for i in range(RUNS):
            driver.send_multipart([f"r{i}".encode(), b"run", pack({"task_data": {"id": f"t{i}"}, "model": "m", "sampling": {}})])
        await eventually(lambda: len(engine.store.rollouts) == RUNS == len(server.runs), WAIT, "every run begun in the view")
        server.send(lambda _: True, [*map(pack, server.deltas[:4])])
        await eventually(lambda: all(r.turns for r in engine.store.rollouts.values()), WAIT, "every run's first turn in the view")
    finally:
        await engine.shutdown()
        driver.close()
        context.term()
    rollouts = list(engine.store.variant_rollouts("px"))
    assert [r.status for r in rollouts] == [Status.UNOBSERVED] * RUNS, [r.reason for r in rollouts]
    assert all("the proxy stopped" in (r.reason or "") for r in rollouts)
    (line,) = [line for line in summary_lines(engine) if line.startswith("px:")]
    assert "failed" not in line and f"{RUNS} unobserved" in line, line


async def test_when_the_view_must_drop_it_sheds_the_runs_already_incomplete_so_the_whole_ones_stay_whole(server, tmp_path, monkeypatch) -> None:
    """A view that fell behind once, and falls behind again while the same runs
    burst and others finish: the copies of the runs already incomplete are shed
    first, so the runs that were whole end whole; the summary says how many."""
    monkeypatch.setattr(ProxyVariant, "copy_bytes", COPY_BYTES)
    engine, variant = await proxy(server, tmp_path, tmp_path / "shed.twrec")
    bursting, finishing = [f"b{i}" for i in range(RUNS)], [f"w{i}" for i in range(RUNS)]
    driver = Driven(variant.listen, bursting + finishing)
    early = [*map(pack, server.deltas[:4])]
    try:
        await burst(server, engine, driver, bursting, early)
        await eventually(lambda: variant.forwarder.dropped > 0 and variant.forwarder.queued == 0, WAIT, "the view caught up after dropping")
        # held again: the bursting runs go on bursting while the others stream to their end
        rest = [*map(pack, server.deltas[4:])]
        for delta in rest:
            server.send(lambda task_id: task_id in bursting, [server.filler] * (FILLERS // len(rest)))
            server.send(lambda task_id: task_id in finishing, [delta])
        server.send(lambda task_id: task_id in finishing, [], reply=True)
        wait_until(lambda: driver.at_driver(dict.fromkeys(finishing, len(early) + len(rest))), WAIT, "the second burst at the driver")
        wait_until(lambda: driver.at_driver(dict.fromkeys(bursting, len(early) + FILLERS + len(rest) * (FILLERS // len(rest)))), WAIT, "the bursting runs' fillers at the driver")
        server.send(lambda task_id: task_id in bursting, rest, reply=True)
        await asyncio.to_thread(driver.thread.join, WAIT)
        assert len(driver.episodes) == 2 * RUNS
        await eventually(
            lambda: all(r.status.finished for r in engine.store.rollouts.values() if r.task_data["id"] in bursting), WAIT, "the last replies in the view"
        )
    finally:
        await engine.shutdown()
    assert variant.forwarder.dropped > 0
    assert_whole_and_incomplete(engine, list(engine.store.variant_rollouts("px")), finishing, bursting)


STOPPED_APP = (
    f"import sys; from tracewatch.core.taps.proxy_variant import ProxyVariant; ProxyVariant.copy_bytes = {COPY_BYTES}; "
    "from tracewatch.cli import main; sys.exit(main(sys.argv[1:]))"
)
"""The headless app, with the small copy bound above."""


def headless_app(server: HeldServer) -> tuple[str, TetheredProcess, list[str], threading.Thread]:
    """The headless proxy app in front of `server`: its listen address, the process,
    and what it prints, gathered by a thread."""
    listen = free_address()
    app = TetheredProcess(
        [sys.executable, "-c", STOPPED_APP, "proxy", "--listen", listen, "--upstream", server.address, "--headless", "--no-record"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(app.stdout or ()), daemon=True)
    reader.start()
    return listen, app, said, reader


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0] == "T"


def test_a_stopped_view_never_stops_the_drivers_runs(server) -> None:
    """The app suspended (SIGSTOP, as Ctrl-Z does) while its drivers' runs burst far
    past what the view may fall behind by, twice (the second time with a run that
    lost copies already, whose copies are shed first): the forwarding process drops
    and sheds for the view and never waits for it, so every run reaches its driver
    whole while the app stays stopped; resumed, the app stops cleanly and says what
    its view lost."""
    listen, app, said, reader = headless_app(server)
    tasks = [f"t{i}" for i in range(RUNS)]
    big = pack({"trace": server.deltas[0]["trace"], "pending": [{"role": "tool", "content": "x" * (1 << 20)}]})
    """Many times the copies the view may fall behind by, one message."""
    early, rest = [*map(pack, server.deltas[:3])], [*map(pack, server.deltas[3:])]
    driver: Driven | None = None
    try:
        (forwarder,) = wait_until(lambda: children(app.pid), WAIT, "the forwarding process")
        driver = Driven(listen, tasks)
        wait_until(lambda: len(server.runs) == RUNS, WAIT, "every run at the server")
        server.send(lambda _: True, early)
        os.kill(app.pid, signal.SIGSTOP)
        wait_until(lambda: stopped(app.pid), WAIT, "the app stopped")
        server.send(lambda task_id: task_id == "t0", [big] * 2)
        wait_until(lambda: driver.at_driver({"t0": len(early) + 2}), WAIT, "the first burst at the driver, the app stopped")
        os.kill(app.pid, signal.SIGCONT)
        server.send(lambda task_id: task_id == "t1", rest, reply=True)
        wait_until(lambda: any(line.startswith("proxy/") and "[t1] done" in line for line in said), WAIT, "the view caught up")
        os.kill(app.pid, signal.SIGSTOP)
        wait_until(lambda: stopped(app.pid), WAIT, "the app stopped again")
        server.send(lambda task_id: task_id == "t0", [big] * 4)
        server.send(lambda task_id: task_id != "t1", rest, reply=True)
        driver.thread.join(WAIT)
        assert stopped(app.pid), "the view never ran meanwhile"
        assert len(driver.episodes) == RUNS and all(e.traces[0].nodes for e in driver.episodes), "every run whole at its driver"
        assert driver.at_driver({"t0": len(early) + 6 + len(rest)})
        os.kill(app.pid, signal.SIGCONT)
        app.terminate()
        app.wait(WAIT)
        reader.join(WAIT)
    finally:
        app.end()
        if driver is not None:
            driver.thread.join(WAIT)
    out = "".join(said)
    assert "the view dropped" in out and "(the drivers got every frame)" in out, out
    wait_until(lambda: pid_gone(forwarder), WAIT, "the forwarding process gone with the app")


def headless_line(said: list[str], task_id: str, status: str) -> str | None:
    """The headless app's line saying the run of `task_id` is `status`, if it said it."""
    return next((text for text in list(said) if text.startswith("proxy/") and f"[{task_id}] {status}" in text), None)


def summary(app: TetheredProcess, said: list[str], reader: threading.Thread) -> str:
    """What the headless app says as it stops (SIGTERM): its summary."""
    app.terminate()
    app.wait(WAIT)
    reader.join(WAIT)
    return next((text for text in said if text.startswith("proxy: ") and "mean reward" in text), f"no summary; the app said {said[-12:]}")


def test_a_view_resumed_after_its_runs_ended_ends_them_at_once_and_the_live_run_goes_on(server) -> None:
    """The app suspended (SIGSTOP) while three runs end and a fourth, on another
    driver, stays live: one run ends whole before a burst far past what the view may
    fall behind by, one bursts and ends with a long reply, one's reply comes last;
    so the replies of the last two come while the copy bound is full and are
    dropped for the view with the copies around them. Resumed, with no more
    traffic, the app ends the three within seconds as their replies say (the one
    that lost deltas *view incomplete*, the others whole: losing only its reply,
    kept and handed over, costs a run nothing), and the live one goes on and ends
    when its driver's run does. Before, what a drop lost was told only with that
    connection's next copies: the three stalled in the view for ever."""
    listen, app, said, reader = headless_app(server)
    ending = [f"e{i}" for i in range(3)]
    big = pack({"trace": server.deltas[0]["trace"], "pending": [{"role": "tool", "content": "x" * (1 << 20)}]})
    early, rest = [*map(pack, server.deltas[:3])], [*map(pack, server.deltas[3:])]
    drivers: list[Driven] = []

    def line(task_id: str, status: str) -> str | None:
        return headless_line(said, task_id, status)

    def seen() -> str:
        return f"; the app said {list(said)[-12:]}"

    try:
        wait_until(lambda: children(app.pid), WAIT, "the forwarding process")
        drivers += [Driven(listen, ending), Driven(listen, ["live"])]
        wait_until(lambda: len(server.runs) == len(ending) + 1, WAIT, "every run at the server")
        server.send(lambda _: True, early)
        wait_until(lambda: all(line(t, "running") for t in [*ending, "live"]), WAIT, lambda: "every run seen running" + seen())
        os.kill(app.pid, signal.SIGSTOP)
        wait_until(lambda: stopped(app.pid), WAIT, "the app stopped")
        server.send(lambda task_id: task_id == "e1", rest, reply=True)
        server.send(lambda task_id: task_id == "e2", rest)
        server.send(lambda task_id: task_id == "e0", [big] * 4 + rest, reply=server.long_reply())
        server.send(lambda task_id: task_id == "e2", [], reply=True)
        drivers[0].thread.join(WAIT)
        assert len(drivers[0].episodes) == len(ending), "the three runs ended at their driver while the app was stopped"
        assert stopped(app.pid), "the view never ran meanwhile"
        os.kill(app.pid, signal.SIGCONT)
        wait_until(lambda: all(line(t, "done") for t in ending), RESUMED_WITHIN, lambda: "the three runs ended in the resumed view" + seen())
        assert not line("live", "done") and not line("live", "failed") and not line("live", "unobserved"), seen()
        server.send(lambda task_id: task_id == "live", rest, reply=True)
        drivers[1].thread.join(WAIT)
        wait_until(lambda: line("live", "done"), WAIT, lambda: "the live run ended as its driver's did" + seen())
        said_last = summary(app, said, reader)
    finally:
        app.end()
        for driver in drivers:
            driver.thread.join(WAIT)
    assert "view incomplete: saw " in (line("e0", "done") or ""), seen()
    assert not any("view incomplete" in (line(t, "done") or "") for t in ["e1", "e2", "live"]), seen()
    assert "4 done" in said_last and "3 of 4 runs seen whole (1 view incomplete)" in said_last, said_last


def driver_sockets(pid: int) -> int:
    """The sockets a process holds open (two per driver's connection in a forwarder).
    A descriptor listed may be closed before it is read: it is not open, so not counted."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except FileNotFoundError:
            continue
    return count


def test_a_view_resumed_after_its_driver_closed_ends_the_runs_that_ended_there(server) -> None:
    """The app suspended (SIGSTOP) while a driver's two runs end, the second after a
    burst far past what the view may fall behind by and with a long reply, then the driver
    closes its connection: resumed, with nothing more from anyone, the app ends both
    runs within seconds as their replies say (the one that lost deltas *view
    incomplete*), and its summary says what the view dropped and counts them. Before,
    the replies dropped for the view were gone and the news of the drop waited for
    copies that would never come: the runs stayed running in the view for ever."""
    listen, app, said, reader = headless_app(server)
    big = pack({"trace": server.deltas[0]["trace"], "pending": [{"role": "tool", "content": "x" * (1 << 20)}]})
    early, rest = [*map(pack, server.deltas[:3])], [*map(pack, server.deltas[3:])]
    context = zmq.Context()
    driver = context.socket(zmq.DEALER)
    driver.setsockopt(zmq.LINGER, 0)
    replies: set[bytes] = set()

    def seen() -> str:
        return f"; the app said {list(said)[-12:]}"

    def replied() -> bool:
        while driver.poll(0):
            request_id, kind, _ = driver.recv_multipart()
            if kind == b"reply":
                replies.add(request_id)
        return len(replies) == 2

    try:
        (forwarder,) = wait_until(lambda: children(app.pid), WAIT, "the forwarding process")
        driver.connect(listen)
        for task_id in ("c0", "c1"):
            driver.send_multipart([task_id.encode(), b"run", pack({"task_data": {"id": task_id}, "model": "m", "sampling": {}})])
        wait_until(lambda: len(server.runs) == 2, WAIT, "both runs at the server")
        server.send(lambda _: True, early)
        wait_until(lambda: all(headless_line(said, t, "running") for t in ("c0", "c1")), WAIT, lambda: "both runs seen running" + seen())
        connected = driver_sockets(forwarder)
        os.kill(app.pid, signal.SIGSTOP)
        wait_until(lambda: stopped(app.pid), WAIT, "the app stopped")
        server.send(lambda task_id: task_id == "c1", rest, reply=True)
        server.send(lambda task_id: task_id == "c0", [big] * 4 + rest, reply=server.long_reply())
        wait_until(replied, WAIT, lambda: f"both replies at the driver (got {len(replies)})")
        driver.close()
        wait_until(
            lambda: driver_sockets(forwarder) <= connected - 2, WAIT,
            lambda: f"the driver's connection closed at the forwarder ({driver_sockets(forwarder)} sockets open, {connected} with it)",
        )
        assert stopped(app.pid), "the view never ran meanwhile"
        os.kill(app.pid, signal.SIGCONT)
        wait_until(
            lambda: all(headless_line(said, t, "done") for t in ("c0", "c1")), RESUMED_WITHIN, lambda: "both runs ended in the resumed view" + seen()
        )
        said_last = summary(app, said, reader)
    finally:
        app.end()
        driver.close()
        context.term()
    assert "view incomplete: saw " in (headless_line(said, "c0", "done") or ""), seen()
    assert "view incomplete" not in (headless_line(said, "c1", "done") or ""), seen()
    assert "2 done" in said_last and "the view dropped" in said_last and "1 of 2 runs seen whole (1 view incomplete)" in said_last, said_last
