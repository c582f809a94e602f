"""How a rollout stands and how it ended: the words every view, count and recording use."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNOBSERVED = "unobserved"
    """A run someone else drives that the viewer stopped watching before it ended: it goes on."""

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset({Status.DONE, Status.FAILED, Status.CANCELLED, Status.UNOBSERVED})
LIVE = (Status.RUNNING, Status.CANCELLING)
"""What can stall: running, or cancelling and not yet ended."""


@dataclass(frozen=True)
class Ending:
    """How a rollout ended (done, failed or cancelled) and why: decided once, when it
    ends; a recording keeps it, so replay, open and export say the same."""

    status: Status
    reason: str | None = None


def episode_ending(record: dict[str, Any]) -> Ending:
    """A run that replied with its episode: done, unless a trace reports errors (a
    retried attempt's error stays in the head; the traces say how it ended)."""
    traces = record.get("traces") or ()
    failed = any(t.get("errors") for t in traces) if traces else bool(record.get("errors"))
    return Ending(Status.FAILED, _first_error(record)) if failed else Ending(Status.DONE)


def _first_error(record: dict[str, Any]) -> str | None:
    for errors in [record.get("errors")] + [t.get("errors") for t in record.get("traces", ())]:
        for error in errors if isinstance(errors, list) else ():
            if isinstance(error, dict):
                return f"{error.get('type', 'Error')}: {error.get('message', '')}".strip()
    return None
