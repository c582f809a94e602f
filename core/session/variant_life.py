"""What every variant keeps of its life, whatever drives its runs (a server we
dispatch to, a proxy, an eval, a relay): its state and why, the escalation of a stop,
each change told to the store and the recording, and a wait until it settles."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracewatch.core.session.contracts import Escalation, VariantState
from tracewatch.core.session.start_cancel import StartAndCancel
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.supervision.capture import tail_lines
from tracewatch.core.supervision.child import ChildError, SupervisedChild


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

    @property
    def quit_warning(self) -> str | None:
        return None

    @property
    def source_lost(self) -> str | None:
        return None

    async def stop(self, on_progress: Callable[[str], None] = lambda _: None) -> None:
        """Nothing runs past a cancel here: a stopped variant is one that settled."""

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

    def _cancelling(self, key: str) -> None:
        """The run is asked to abort, in the store and the recording alike: whatever
        ends it next (a bad delta, the aborted reply) ends it cancelled in a replay too."""
        self.store.cancelling(key)
        if self.recorder is not None:
            self.recorder.cancelling(key)

    def _event(self, kind: str, **fields: Any) -> None:
        if self.recorder is not None:
            self.recorder.event(self.name, kind, **{k: v for k, v in fields.items() if v is not None})


class CapturedChild(StartAndCancel, VariantLife):
    """A variant that runs a supervised child (a server, an eval): its stop (SIGTERM
    through the supervisor, SIGKILL when the grace runs out or a second cancel asks),
    each step of it as a note, the grace left, and the tail of its captured output."""

    child_name: str
    """What the notes call the child ("server": "SIGTERM sent to the server's group")."""
    stdout_path: Path | None = None
    stderr_path: Path | None = None
    _grace_until: float | None = None
    _kill_now = False

    def _cancel_again(self) -> None:
        self._kill_now = True  # `_terminate` sees it and kills at once

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

    async def _terminate(self, child: SupervisedChild, grace: float | None) -> None:
        """Until the child is gone: `grace` (None: the child's configured one) after
        SIGTERM, or at once once `_kill_now` is set."""
        loop = asyncio.get_running_loop()

        def on_event(kind: str, detail: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(self._on_child_event, kind, detail)

        stopping = loop.create_task(asyncio.to_thread(child.terminate, grace, on_event))
        while not stopping.done():
            if self._kill_now:
                await asyncio.to_thread(child.kill)
                self._kill_now = False
            await asyncio.wait({stopping}, timeout=0.1)
        with contextlib.suppress(ChildError):
            stopping.result()
        self._grace_until = None

    def _on_child_event(self, kind: str, detail: dict[str, Any]) -> None:
        group = f"the {self.child_name}'s group"
        if kind == "sigterm":
            grace = float(detail.get("grace_seconds", 0.0))
            # the supervisor's own deadline, so the countdown reaches 0 as SIGKILL is sent
            self._grace_until = float(detail.get("kill_at", time.time() + grace))
            self._note("sigterm", f"SIGTERM sent to {group}, grace {grace:g}s")
        elif kind == "sigkill":
            self._grace_until = None
            by = "a second cancel" if detail.get("by") == "app" else "the grace ran out"
            self._note("sigkill", f"SIGKILL sent to {group}: {by}")
        elif kind == "exited":
            self._grace_until = None
            self._note("exited", f"the {self.child_name} exited with code {detail.get('exit_code')}")
