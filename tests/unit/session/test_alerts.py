"""Alerts: what a user not looking is told, once each: a rollout stalled past its
variant's threshold (cancelled too past the cancel threshold), a variant that failed or
was cancelled, the run ending; and the desktop notification's bytes."""

from __future__ import annotations

import asyncio
import io

from tests.support.tui_standin import StandInEngine, StandInVariant
from tracewatch.core.engine import headless
from tracewatch.core.session.alerts import Alert, AlertWatch, terminal_notification
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.status import Ending, Status
from tracewatch.core.session.store import RolloutStore

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def session() -> tuple[StandInEngine, Clock]:
    clock = Clock()
    store = RolloutStore(stall_seconds=60.0, clock=clock, stall_by_variant={"quick": 10.0, "patient": 100.0})
    engine = StandInEngine(store, {name: StandInVariant(name, store) for name in ("quick", "patient")})
    for name in ("quick", "patient"):
        store.add_rollout(name, 0, {"name": f"{name} task"}, key=f"{name}/0")
        store.started(f"{name}/0", f"req-{name}")
    return engine, clock


def test_a_stall_is_told_once_per_stall_at_each_variants_own_threshold_and_cancelled_past_the_limit():
    """The cancel time caps each variant's threshold, as headless does: a variant slower
    to call a stall is still cancelled at the cancel time."""
    engine, clock = session()
    watch = AlertWatch(engine, cancel_stalled=50.0)
    assert watch.check(clock.now) == []
    clock.now += 20
    assert watch.check(clock.now) == [Alert("Rollout stalled", "quick/0 (quick task): nothing for 20s", "warning")]
    clock.now += 5
    assert watch.check(clock.now) == [], "said once"
    engine.store.apply_delta("quick/0", {"trace": "t", "open": {}}, clock.now)
    assert watch.check(clock.now) == []
    clock.now += 30
    assert [a.message for a in watch.check(clock.now)] == [
        "patient/0 (patient task): nothing for 55s", "patient/0 (patient task): silent for 55s", "quick/0 (quick task): nothing for 30s"
    ], "a second stall is news; the patient variant's own 100 s is capped at 50 s"
    assert engine.cancelled == ["patient/0"]
    clock.now += 30
    alerts = watch.check(clock.now)
    assert alerts == [Alert("Cancelling a stalled rollout", "quick/0 (quick task): silent for 60s", "warning")]
    assert engine.cancelled == ["patient/0", "quick/0"]
    clock.now += 5
    assert watch.check(clock.now) == [] and engine.cancelled == ["patient/0", "quick/0"], "each cancelled once"


def test_a_variant_that_fails_or_is_cancelled_and_the_run_ending_are_told_once():
    engine, clock = session()
    watch = AlertWatch(engine)
    quick, patient = engine.variants["quick"], engine.variants["patient"]
    quick.state, quick.reason = VariantState.FAILED, "server exited with code 1"
    assert watch.check(clock.now) == [Alert("Variant failed", "quick: server exited with code 1", "error")]
    assert watch.check(clock.now) == []
    engine.store.ended("quick/0", Ending(Status.FAILED, "gone"))
    engine.store.ended("patient/0", Ending(Status.CANCELLED, "cancelled"))
    patient.state = VariantState.CANCELLED
    assert watch.check(clock.now) == [
        Alert("Variant cancelled", "patient", "warning"),
        Alert("Run ended", "1 failed, 1 cancelled", "error"),
    ]
    assert watch.check(clock.now) == []
    assert AlertWatch(engine).check(clock.now) == [], "a run opened after it ended is not news"


def test_a_desktop_notification_carries_printable_text_only():
    alert = Alert("Rollout stalled", "evil\x1b]52;c;aGk=\x07/0; \x9b2Jtask", "warning")
    assert terminal_notification(alert, 9) == "\x1b]9;Rollout stalled: evil]52;c;aGk=/0; 2Jtask\x07"
    assert terminal_notification(alert, 777) == "\x1b]777;notify;Rollout stalled;evil]52,c,aGk=/0, 2Jtask\x07"


class RefusingEngine(StandInEngine):
    """A session whose variant refuses to cancel `quick/0` (its run ending already, say)."""

    def cancel_rollout(self, key: str) -> bool:
        if key == "quick/0":
            self.cancelled.append(key)
            return False
        return super().cancel_rollout(key)


def test_headless_and_the_app_cancel_a_stall_by_one_rule_and_tell_only_a_cancel_taken():
    """Past the cancel time, a running rollout is asked once and the cancel is told only
    if its variant took it; one cancelling already is not asked again. Headless told a
    cancel its variant had refused, and asked a cancelling rollout again."""
    told = {}
    for who in ("headless", "app"):
        clock = Clock()
        store = RolloutStore(stall_seconds=60.0, clock=clock)
        engine = RefusingEngine(store, {name: StandInVariant(name, store) for name in ("quick", "patient")})
        for name in ("quick", "patient"):
            store.add_rollout(name, 0, {"name": f"{name} task"}, key=f"{name}/0")
            store.started(f"{name}/0", f"req-{name}")
        store.cancelling("patient/0")  # the user cancelled it; its server is slow to end it
        clock.now += 100
        if who == "headless":
            out = io.StringIO()
            asyncio.run(headless.run_headless(engine, out=out, cancel_stalled=30.0))
            told[who] = [line for line in out.getvalue().splitlines() if "stalled:" in line or "cancelling:" in line]
        else:
            told[who] = [alert.title for alert in AlertWatch(engine, cancel_stalled=30.0).check(clock.now)]
        assert engine.cancelled == ["quick/0"], who
    assert told == {
        "headless": ["quick/0 [quick task] stalled: no delta for 100s", "patient/0 [patient task] stalled: no delta for 100s"],
        "app": ["Rollout stalled", "Rollout stalled"],
    }
