"""Alerts in the app: a variant's failure and the run's end as notifications, with the
bell when asked for; a stalled rollout cancelled past the cancel threshold, on screen
as headless does."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.app_screen import more_ticks
from tests.support.polling import until
from tests.support.scripted_server import ScriptedServer, attached, header
from tests.support.tui_standin import T0, StandInEngine, StandInVariant, load_fixture
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.engine.replay import ReplaySession
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.alerts import AlertSettings
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.status import Ending, Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.app import TracewatchApp


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_failures_stalls_and_the_end_are_notified_and_ring_the_bell_when_asked():
    clock = Clock()
    store = RolloutStore(stall_seconds=30.0, clock=clock)
    engine = StandInEngine(store, {"baseline": StandInVariant("baseline", store)})
    store.add_rollout("baseline", 0, {"name": "task"}, key="baseline/0")
    store.started("baseline/0", "req")
    app = TracewatchApp(engine, alerts=AlertSettings(bell=True, cancel_stalled=45.0))
    rings = []
    app.bell = lambda: rings.append(clock.now)  # headless: Textual's bell writes nothing
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        clock.now += 50  # past the stall threshold and the cancel threshold
        await until(pilot, lambda: engine.cancelled == ["baseline/0"])
        # a notification is a message the app handles later: the cancel is done at once
        await until(pilot, lambda: any(n.title == "Cancelling a stalled rollout" for n in app._notifications), "the cancel told")
        messages = [(n.title, n.message) for n in app._notifications]
        assert ("Rollout stalled", "baseline/0 (task): nothing for 50s") in messages
        assert ("Cancelling a stalled rollout", "baseline/0 (task): silent for 50s") in messages
        variant = engine.variants["baseline"]
        variant.state, variant.reason = VariantState.FAILED, "[bold]server[/bold] exited"
        store.ended("baseline/0", Ending(Status.CANCELLED, "cancelled"))
        clock.now += 1
        await until(pilot, lambda: any(n.title == "Run ended" for n in app._notifications))
        assert ("Variant failed", "baseline: [bold]server[/bold] exited") in [(n.title, n.message) for n in app._notifications]
        assert len(rings) == 4, "one ring per alert"


async def test_a_variant_slow_to_call_a_stall_is_cancelled_at_the_cancel_time_as_headless_does(tmp_path):
    """A cancel time below the variant's `stall_seconds`: the app sees the hung run
    stalled at the cancel time, and cancels it then, not at the variant's threshold."""
    async with ScriptedServer({"silent": [("delta", {"trace": "t", "open": header("t")})]}) as server:
        engine = LiveSession(attached(server.address, ["silent"], tmp_path, stall_seconds=600.0), session_dir=tmp_path / "session")
        app = TracewatchApp(engine, alerts=AlertSettings(cancel_stalled=1.0))
        async with app.run_test(size=(120, 40)) as pilot:
            rollout = await until(pilot, lambda: engine.store.rollouts.get("remote/0"), "the run announced")
            await until(pilot, lambda: rollout.status is Status.CANCELLED, "the hung run cancelled", 30.0)
            await asyncio.wait_for(engine.shutdown(), 30.0)
    assert server.cancels == [rollout.request_id]


def write_cancelled_run(path: Path) -> None:
    """A run whose candidate was cancelled and whose baseline ended: two alerts' worth."""
    deltas, tasks, replies = load_fixture()
    with Recorder(path, meta={"test": True}) as rec:
        for variant in ("baseline", "candidate"):
            rec.event(variant, "starting", t=T0)
            rec.event(variant, "running", t=T0 + 1)
            for index, (run, task) in enumerate(tasks.items()):
                rec.rollout(f"{variant}/{run}", variant, index, task, 0, t=T0 + 1)
                rec.request(f"{variant}/{run}", f"req-{variant}-{run}", t=T0 + 1)
        for item in deltas:
            rec.delta(f"baseline/{item['request']}", item["delta"], t=T0 + 1 + item["t"])
        for run, reply in replies.items():
            rec.reply(f"baseline/{run}", reply, t=T0 + 2)
            rec.reply(f"candidate/{run}", {"success": False, "error": "cancelled"}, t=T0 + 2)
        rec.event("candidate", "cancelled", t=T0 + 2, reason="cancelled by the user")
        rec.event("baseline", "done", t=T0 + 3)


async def test_an_opened_recording_says_nothing_while_a_replay_re_enacts_its_alerts(tmp_path):
    """`open` reads a recording while its first screen is up: the variants it meets
    settled and the run ended long ago, and it popped "Variant cancelled" and "Run
    ended" as if they happened now. A replay plays the run at its pace and says them
    when they happen in it, as the live session did."""
    path = tmp_path / "cancelled.twrec"
    write_cancelled_run(path)
    opened = OpenedRecording(path, at_once=False)
    app = TracewatchApp(opened, alerts=AlertSettings(bell=True))
    rings: list[None] = []
    app.bell = lambda: rings.append(None)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await until(pilot, lambda: opened.store.partial is None and app.table.row_count == len(opened.store.rollouts) > 0, "the recording indexed")
        await more_ticks(app, pilot, 31, "a second of ticks over the indexed run")
        assert [(n.title, n.message) for n in app._notifications] == [] and not rings
    replay = ReplaySession(path, speed=0)
    app = TracewatchApp(replay)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await until(pilot, lambda: any(n.title == "Run ended" for n in app._notifications), "the replayed run's end told")
        assert ("Variant cancelled", "candidate: cancelled by the user") in [(n.title, n.message) for n in app._notifications]
