"""What the taps (proxy, eval, relay viewer) share beyond any variant's life: the runs
they observe rather than dispatch, the model and sampling each run names for itself,
and a short log of what the tap itself saw."""

from __future__ import annotations

import collections
import time
from typing import Any

from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.variant_life import VariantLife
from tracewatch.core.taps.observed import ObservedRuns

LOG_LINES = 500


class TapVariant(VariantLife):
    model = None
    """Each run names its own model and sampling (shown on its rollout)."""
    sampling: dict[str, Any] = {}

    def __init__(self, name: str, store: RolloutStore, recorder: Any = None) -> None:
        super().__init__(name, store, recorder)
        self.runs = ObservedRuns(name, store, recorder)
        self._log: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
        self._logged = 0

    def log_tail(self, n: int = 200) -> list[str]:
        return list(self._log)[-n:]

    def log_size(self) -> int:
        return self._logged

    def _say(self, line: str) -> None:
        text = f"{time.strftime('%H:%M:%S')} {line}"
        self._log.append(text)
        self._logged += len(text) + 1
