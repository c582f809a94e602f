"""What every variant keeps of its life, whatever drives its runs (a server we
dispatch to, a proxy, an eval, a relay): its state and why, the escalation of a stop,
each change told to the store and the recording, and a wait until it settles."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

from core.session.contracts import Escalation, VariantState
from core.session.store import RolloutStore
from core.supervision.capture import tail_lines


class VariantLife:
    def __init__(self, name: str, store: RolloutStore, recorder: Any = None) -> None:
        self.name = name
        self.store = store
        self.recorder = recorder
        self.state = VariantState.IDLE
        self.reason: str | None = None
        self.server_started_at: float | None = None
        self.escalation: list[Escalation] = []
        self._main: asyncio.Task[None] | None = None
        self._stopping: asyncio.Task[None] | None = None
        store.add_variant(name)

    async def wait(self) -> None:
        """Until the variant has settled (done, cancelled or failed)."""
        for task in (self._main, self._stopping):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.shield(task)

    def _set(self, state: VariantState) -> None:
        self.state = state
        self.store.touch_variant(self.name)
        self._event(state.value, reason=self.reason)

    def _note(self, kind: str, detail: str) -> None:
        self.escalation.append(Escalation(time.time(), kind, detail))
        self.store.touch_variant(self.name)
        self._event(kind, detail=detail)

    def _event(self, kind: str, **fields: Any) -> None:
        if self.recorder is not None:
            self.recorder.event(self.name, kind, **{k: v for k, v in fields.items() if v is not None})


class CapturedChild:
    """What a variant that runs a supervised child (a server, an eval) shows of it:
    the grace left before SIGKILL, and the tail of its captured stdout and stderr."""

    stdout_path: Path | None = None
    stderr_path: Path | None = None
    _grace_until: float | None = None

    def grace_left(self, now: float | None = None) -> float | None:
        if self._grace_until is None:
            return None
        return max(0.0, self._grace_until - (now if now is not None else time.time()))

    def log_tail(self, n: int = 200) -> list[str]:
        lines: list[str] = []
        for path in (self.stdout_path, self.stderr_path):
            if path is not None and path.exists():
                lines.extend(tail_lines(path, n))
        return lines[-n:]

    def log_size(self) -> int:
        return sum(path.stat().st_size for path in (self.stdout_path, self.stderr_path) if path is not None and path.exists())
