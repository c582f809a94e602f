"""Which live rollouts went silent past their variant's threshold.

The status line, the alerts and headless ask once a second. The rollouts that can
stall (running, or cancelling and not yet ended) are kept by when each last spoke,
quietest first, so a check looks at the quietest until one is not stalled, not at
every rollout in flight.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from tracewatch.core.session.rollout import Rollout


class StallWatch:
    def __init__(self, seconds: float, by_variant: Mapping[str, float] | None = None) -> None:
        self.seconds = seconds
        """How long a live rollout may be silent, for a variant with no threshold of its own."""
        self.by_variant = dict(by_variant or {})
        """Each variant's own threshold (its config's `stall_seconds`)."""
        self._live: set[str] = set()
        """Keys of the rollouts running or cancelling: what can stall, without a look at
        every queued and finished one."""
        self._heard: dict[str, float] = {}
        """The live rollouts that can stall, by when each last spoke (`Rollout.idle`),
        quietest first while `_in_order`."""
        self._in_order = True
        """False once a rollout spoke at a time before the last one heard (times a
        recording or a test set out of order): the checks then pass over all."""
        self._last_heard = -math.inf

    def threshold(self, variant: str) -> float:
        return self.by_variant.get(variant, self.seconds)

    def cap(self, limit: float) -> None:
        self.seconds = min(self.seconds, limit)
        self.by_variant = {name: min(seconds, limit) for name, seconds in self.by_variant.items()}

    def live(self, rollout: Rollout) -> None:
        """It runs (or a recording saw it live): it can stall, counted from its last word."""
        self._live.add(rollout.key)
        self._hear(rollout)

    def cancelling(self, rollout: Rollout) -> None:
        """Asked to cancel: it can stall until it ends, from when it last spoke."""
        self._live.add(rollout.key)
        if rollout.key not in self._heard:
            self._hear(rollout)

    def spoke(self, rollout: Rollout) -> None:
        if rollout.key in self._live:
            self._hear(rollout)

    def forget(self, key: str) -> None:
        """It ended, or starts again from nothing: it cannot stall."""
        self._live.discard(key)
        self._heard.pop(key, None)

    def silent(self, now: float, rollouts: Mapping[str, Rollout], variants: Iterable[str]) -> list[str]:
        """The keys of the live rollouts past their variant's `threshold`: a look at the
        quietest until one is not silent past the lowest threshold, so a run with none
        stalled costs a look at one rollout; a rollout is read only when variants'
        thresholds differ."""
        limits = {name: self.threshold(name) for name in variants}
        lowest = min(limits.values(), default=self.seconds)
        quiet = self._quiet(now, lowest)
        if all(limit == lowest for limit in limits.values()):
            return [key for key, heard in quiet if now - heard > lowest]
        return [key for key, heard in quiet if now - heard > limits[rollouts[key].variant]]

    def _quiet(self, now: float, threshold: float) -> Iterable[tuple[str, float]]:
        """The live rollouts silent past `threshold` (and, once the times came out of
        order, every one that can stall)."""
        if not self._in_order:
            return self._heard.items()
        quiet = []
        for key, heard in self._heard.items():
            if now - heard <= threshold:
                break
            quiet.append((key, heard))
        return quiet

    def _hear(self, rollout: Rollout) -> None:
        """It moves to the end of `_heard`. One with neither time is never stalled
        (`Rollout.idle` is 0) and is left out."""
        heard = rollout.last_delta_at or rollout.started_at
        self._heard.pop(rollout.key, None)
        if heard is None:
            return
        if heard < self._last_heard:
            self._in_order = False
        self._last_heard = max(self._last_heard, heard)
        self._heard[rollout.key] = heard
