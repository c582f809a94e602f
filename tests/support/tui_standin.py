"""A stand-in for `tracewatch.core.engine.live.LiveSession` over a real RolloutStore fed with the recorded
verifiers 0.4.0 deltas, recording what the app asks of it (start, cancel, shutdown)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult

from tests.support.repo import FIXTURE
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.contracts import Escalation, VariantState
from tracewatch.core.session.session import Session
from tracewatch.core.session.start_cancel import StartAndCancel
from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.table.rollouts_table import RolloutsTable


def load_fixture() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(deltas in arrival order, task_data per run label, reply per run label)."""
    deltas = [json.loads(line) for line in (FIXTURE / "deltas.jsonl").read_text().splitlines()]
    requests = json.loads((FIXTURE / "requests.json").read_text())
    replies = json.loads((FIXTURE / "replies.json").read_text())
    tasks = {r["request"]: r["payload"]["task_data"] for r in requests if r["method"] == "run"}
    return deltas, tasks, {r["request"]: r["reply"] for r in replies if r["request"]}


def fixture_episodes() -> list[dict[str, Any]]:
    """The fixture's episodes, as verifiers wrote them."""
    return [e["episode"] for e in json.loads((FIXTURE / "episodes.json").read_text())]


def feed(store: RolloutStore, variant: str, copies: int = 1, finish: bool = True, label: str = "") -> list[str]:
    """Add `copies` of every fixture run to `variant` and apply their deltas; with
    `finish`, apply the replies too (done, failed, cancelled)."""
    deltas, tasks, replies = load_fixture()
    base = store.clock() - deltas[-1]["t"] - 1.0
    keys: dict[tuple[int, str], str] = {}
    for copy in range(copies):
        for index, (run, task) in enumerate(tasks.items()):
            task = dict(task, name=f"{label}{task['name']}") if label else task
            rollout = store.add_rollout(variant, index, task, copy, key=f"{variant}/{run}/{copy}")
            store.started(rollout.key, f"req-{rollout.key}", t=base)
            keys[copy, run] = rollout.key
    for copy in range(copies):
        for item in deltas:
            store.apply_delta(keys[copy, item["request"]], item["delta"], t=base + item["t"])
    if finish:
        for (_copy, run), key in keys.items():
            reply = replies.get(run) or {}
            if reply.get("head"):
                record = store.rollouts[key].assembly.finish(reply["head"], reply["traces"])
                store.finished(key, record, t=store.rollouts[key].last_delta_at)
            elif run == "cancel":
                store.failed(key, reply.get("error") or "cancelled", cancelled=True, t=store.rollouts[key].last_delta_at)
    return list(keys.values())



def queued_and_running(count: int, running_every: int) -> RolloutStore:
    """`count` rollouts of variant `v` (`v/0`, `v/1`, ...), each one whose index is not
    a multiple of `running_every` started, the rest queued."""
    store = RolloutStore()
    for index in range(count):
        key = f"v/{index}"
        store.add_rollout("v", index, {"name": f"task {index}"}, key=key)
        if index % running_every:
            store.started(key, f"req-{key}")
    return store

class StandInVariant(StartAndCancel):
    """A `VariantView` that records the commands it is given."""

    def __init__(self, name: str, store: RolloutStore, state: VariantState = VariantState.RUNNING) -> None:
        self.name = name
        self.store = store
        self.state = state
        self.reason: str | None = None
        self.pid: int | None = 4242
        self.supervised = True
        self.address: str | None = "tcp://127.0.0.1:5555"
        self.server_started_at: float | None = store.clock() - 62
        self.health_left: float | None = None
        self.escalation: list[Escalation] = []
        self.outcome_text: str | None = None
        self.model: str | None = "demo-model"
        self.sampling: dict[str, Any] = {"temperature": 0.2 if name == "baseline" else 0.8}
        self.cancel_unavailable: str | None = None
        self.rollout_cancel_unavailable: str | None = None
        self.cancel_words: str | None = None
        self.status_line: str | None = None
        self.source_lost: str | None = None
        self.calls: list[str] = []
        self.lines = [f"{name} server listening", "\x1b[31mred?\x1b[0m [bold]not markup[/bold]"]
        store.add_variant(name)

    def grace_left(self, now: float | None = None) -> float | None:
        return 3.0 if self.state is VariantState.CANCELLING else None

    def log_tail(self, n: int = 200) -> list[str]:
        return self.lines[-n:]

    def log_size(self) -> int:
        return sum(len(line) + 1 for line in self.lines)

    def start(self) -> None:
        self.calls.append("start")
        self.state = VariantState.STARTING
        self.store.touch_variant(self.name)

    def cancel(self) -> None:
        self.calls.append("cancel")
        super().cancel()
        self.store.touch_variant(self.name)

    def _begin_cancel(self) -> None:
        self.state = VariantState.CANCELLING
        self.escalation = [Escalation(time.time(), "cancel-runs", ""), Escalation(time.time(), "sigterm", "grace 5s")]

    def _cancel_again(self) -> None:
        self.escalation.append(Escalation(time.time(), "sigkill", "now"))


class StandInEngine(Session):
    """A session whose variants are stand-ins; it counts what the app asks of it
    (start, select, cancel, shutdown). Export is core's own."""

    quit_warning: str | None = None
    """Set by a test to stand in for a proxy's warning."""

    def __init__(self, store: RolloutStore, variants: dict[str, StandInVariant], session_dir: Path = Path(".")) -> None:
        super().__init__(store, session_dir)
        self.variants: dict[str, StandInVariant] = variants
        self.cancelled: list[str] = []
        self.shutdowns = 0
        self.shutdown_gate: asyncio.Event | None = None
        """Set: shutdown waits for it, so a test can look at the quit screen meanwhile."""
        self.started = 0
        self.selections: list[str] = []

    async def start(self) -> None:
        self.started += 1

    def select(self, key: str | None) -> None:
        if key is not None:
            self.selections.append(key)

    def cancel_rollout(self, key: str) -> bool:
        self.cancelled.append(key)
        self.store.cancelling(key)
        return True

    async def shutdown(self, on_progress: Callable[[str], None] = lambda _: None) -> None:
        self.shutdowns += 1
        for name in self.variants:
            on_progress(f"{name}: cancelling")
        if self.shutdown_gate is not None:
            await self.shutdown_gate.wait()
        on_progress("every server stopped")


class TableApp(App[None]):
    """The rollouts table alone over a store: for its tests and its benchmark."""

    def __init__(self, store: RolloutStore) -> None:
        super().__init__()
        self.store = store

    def compose(self) -> ComposeResult:
        yield RolloutsTable(self.store, self.store.clock)


def make_engine(
    variants: tuple[str, ...] = ("baseline", "candidate"),
    copies: int = 1,
    finish: bool = True,
    session_dir: Path = Path("."),
    clock: Callable[[], float] = time.time,
) -> StandInEngine:
    """`clock` fixed makes every drawn time (elapsed, activity, uptime) fixed too."""
    store = RolloutStore(stall_seconds=60.0, clock=clock)
    standins = {name: StandInVariant(name, store) for name in variants}
    for name in variants:
        feed(store, name, copies, finish)
    return StandInEngine(store, standins, session_dir)


T0 = 1_700_000_000.0


def write_many_runs(path: Path, copies: int) -> None:
    """`copies` of every fixture run under one variant, interleaved as a busy run
    records them: every rollout announced first, then each delta of the fixture for
    every copy in turn, then the replies; a file big enough that its index is read
    over many slices."""
    deltas, tasks, replies = load_fixture()
    with Recorder(path, meta={"test": True}) as rec:
        for copy in range(copies):
            for index, (run, task) in enumerate(tasks.items()):
                rec.rollout(f"v/{run}/{copy}", "v", index, task, copy, t=T0)
                rec.request(f"v/{run}/{copy}", f"req-{run}-{copy}", t=T0)
        for item in deltas:
            for copy in range(copies):
                rec.delta(f"v/{item['request']}/{copy}", item["delta"], t=T0 + item["t"])
        for run, reply in replies.items():
            for copy in range(copies):
                rec.reply(f"v/{run}/{copy}", reply, t=T0 + 30)


def write_recording(path: Path) -> None:
    """Two variants' lifecycles (model and sampling on their "started" events) and
    the fixture's runs under each, at recorded times."""
    deltas, tasks, replies = load_fixture()
    with Recorder(path, meta={"test": True}) as rec:
        for variant, temperature in (("baseline", 0.2), ("candidate", 0.8)):
            rec.event(variant, "starting", t=T0)
            rec.event(variant, "started", t=T0 + 1, pid=100, address="tcp://127.0.0.1:1", model="demo-model", sampling={"temperature": temperature})
            rec.event(variant, "running", t=T0 + 2)
            for index, (run, task) in enumerate(tasks.items()):
                rec.rollout(f"{variant}/{run}", variant, index, task, 0, t=T0 + 2)
                rec.request(f"{variant}/{run}", f"req-{variant}-{run}", t=T0 + 2)
        for item in deltas:
            for variant in ("baseline", "candidate"):
                rec.delta(f"{variant}/{item['request']}", item["delta"], t=T0 + 2 + item["t"])
        for run, reply in replies.items():
            for variant in ("baseline", "candidate"):
                rec.reply(f"{variant}/{run}", reply, t=T0 + 30)
