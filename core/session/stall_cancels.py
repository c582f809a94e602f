"""`--cancel-stalled`, one rule for headless and the app: no variant waits longer than
the limit to call a rollout stalled (a variant's own, longer threshold would hide the
stall the cancel must act on), and a running rollout silent that long is asked to
cancel once. Each caller words what happened its own way."""

from __future__ import annotations

from tracewatch.core.session.contracts import SessionView
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.status import Status


class StallCancels:
    def __init__(self, session: SessionView, limit: float | None) -> None:
        self.session = session
        self.limit = limit
        self._asked: set[str] = set()
        if limit is not None:
            session.cap_stall(limit)

    def cancel(self, rollout: Rollout, now: float) -> bool:
        """Cancel `rollout` if it is due: running, silent for the limit, not asked
        before. True only when its variant took the cancel (there is news to tell)."""
        limit = self.limit
        if limit is None or rollout.key in self._asked or rollout.status is not Status.RUNNING or rollout.idle(now) < limit:
            return False
        self._asked.add(rollout.key)
        return self.session.cancel_rollout(rollout.key)
