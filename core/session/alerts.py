"""What is worth telling a user who is not looking: a rollout that stalled past its
variant's threshold, a variant that failed or was cancelled (its server killed, say),
and the run ending. Each is said once, as an `Alert`; the app shows it as a notification
and, if asked, rings the terminal's bell or sends a desktop notification through it.
With a cancel threshold, a rollout silent that long is also cancelled, as headless does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tracewatch.core.session.contracts import SessionView, VariantState
from tracewatch.core.session.stall_cancels import StallCancels
from tracewatch.core.session.status import Status

Severity = Literal["information", "warning", "error"]
"""How loud an alert is: a notification's levels, as the app shows them."""


@dataclass(frozen=True)
class AlertSettings:
    """How the app tells a user who is not looking (the command line's choice)."""

    bell: bool = False
    osc: int | None = None
    """9 or 777: also a desktop notification through the terminal."""
    cancel_stalled: float | None = None


@dataclass(frozen=True)
class Alert:
    title: str
    message: str
    severity: Severity


class AlertWatch:
    """Looks at the session once a second and says what newly went wrong or ended."""

    def __init__(self, session: SessionView, cancel_stalled: float | None = None) -> None:
        self.session = session
        self.cancels = StallCancels(session, cancel_stalled)
        self._stalled: set[str] = set()
        self._states = {name: variant.state for name, variant in session.variants.items()}
        self._ended = self._run_over()  # a run opened after it ended is not news

    def check(self, now: float) -> list[Alert]:
        if self.session.offline:  # its index reading on is no news; a replay says what happened when it did
            return []
        return [*self._stalls(now), *self._variants(), *self._run_end()]

    def _stalls(self, now: float) -> list[Alert]:
        store = self.session.store
        alerts = []
        stalled = set()
        for rollout in store.stalled(now):
            idle = rollout.idle(now)
            stalled.add(rollout.key)
            label = f"{rollout.key} ({rollout.task_label})"
            if rollout.key not in self._stalled:
                alerts.append(Alert("Rollout stalled", f"{label}: nothing for {idle:.0f}s", "warning"))
            if self.cancels.cancel(rollout, now):
                alerts.append(Alert("Cancelling a stalled rollout", f"{label}: silent for {idle:.0f}s", "warning"))
        self._stalled = stalled  # one that speaks again and stalls again is said again
        return alerts

    def _variants(self) -> list[Alert]:
        alerts = []
        for name, variant in self.session.variants.items():
            state, before = variant.state, self._states.get(name)
            self._states[name] = state
            if state == before:
                continue
            why = f": {variant.reason}" if variant.reason else ""
            if state is VariantState.FAILED:
                alerts.append(Alert("Variant failed", f"{name}{why}", "error"))
            elif state is VariantState.CANCELLED:
                alerts.append(Alert("Variant cancelled", f"{name}{why}", "warning"))
        return alerts

    def _run_end(self) -> list[Alert]:
        """Once every variant has settled with rollouts run; a start afterwards makes a
        new run whose end is said too."""
        ended = self._run_over()
        alerts = []
        if ended and not self._ended:
            counts = dict.fromkeys(Status, 0)
            for rollout in self.session.store.rollouts.values():
                counts[rollout.status] += 1
            told = ", ".join(f"{n} {status.value}" for status, n in counts.items() if n)
            severity: Severity = "error" if counts[Status.FAILED] else "information"
            alerts.append(Alert("Run ended", told, severity))
        self._ended = ended
        return alerts


    def _run_over(self) -> bool:
        variants = self.session.variants.values()
        return bool(variants) and all(v.state.settled for v in variants) and bool(self.session.store.rollouts)


def terminal_notification(alert: Alert, osc: int) -> str:
    """The alert as a desktop notification the terminal shows (OSC 9, or OSC 777's
    notify): its text printable only, so no control sequence in a rollout's name or a
    server's reason reaches the terminal, and no `;` splits OSC 777's fields."""
    title, message = (_printable(text) for text in (alert.title, alert.message))
    if osc == 777:
        return f"\x1b]777;notify;{title.replace(';', ',')};{message.replace(';', ',')}\x07"
    return f"\x1b]9;{title}: {message}\x07"


def _printable(text: str) -> str:
    return "".join(char for char in text if char.isprintable())[:200]
