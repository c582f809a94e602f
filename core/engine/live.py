"""Every variant of one session, the store they feed, and the recording they leave.

The app and the headless runner both drive a `LiveSession`; neither touches a socket or
a process. `shutdown` is the one way out: it cancels every run, stops every child
and waits for them, so quitting leaves nothing running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracewatch.core.engine.variant_kinds import variant_for
from tracewatch.core.paths import new_session_dir, prune_sessions, sessions_root
from tracewatch.core.recordings.eviction import GIVE_BACK_AFTER, Eviction, give_back_freed_memory
from tracewatch.core.session.config import Config
from tracewatch.core.session.contracts import LiveVariant, VariantState
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.session import Session
from tracewatch.core.session.store import RolloutStore

EVICT_EVERY = 0.5
"""Seconds between looks for finished rollouts whose traces may leave memory."""


class LiveSession(Session):
    def __init__(
        self,
        config: Config,
        *,
        recorder: Any = None,
        session_dir: Path | None = None,
    ) -> None:
        super().__init__(
            RolloutStore(stall_by_variant={v.name: v.stall_seconds for v in config.variants}),
            session_dir or new_session_dir(),
            getattr(recorder, "path", None),
        )
        self.config = config
        self.recorder = recorder
        self.variants: dict[str, LiveVariant] = {
            variant.name: variant_for(variant, self.store, self.session_dir, recorder) for variant in config.variants
        }
        self.eviction = Eviction(self.store, recorder) if recorder is not None else None
        """Finished rollouts leave memory while recorded (`tracewatch.core.recordings.eviction`)."""
        self._evicting: asyncio.Task[None] | None = None

    @property
    def quit_warning(self) -> str | None:
        warnings = [v.quit_warning for v in self.variants.values()]
        return "; ".join(w for w in warnings if w) or None

    @property
    def recording_stopped(self) -> str | None:
        return None if self.recorder is None else self.recorder.error

    async def start(self) -> None:
        self._claim()
        if self.session_dir.parent == sessions_root():
            prune_sessions(self.config.keep_sessions)
        for variant in self.variants.values():
            variant.start()
        if self.eviction is not None and self._evicting is None:
            self._evicting = asyncio.get_running_loop().create_task(self._evict(self.eviction))

    async def _evict(self, eviction: Eviction) -> None:
        freed = 0
        while True:
            await asyncio.sleep(EVICT_EVERY)
            freed += eviction.run(self.in_view)
            if freed >= GIVE_BACK_AFTER:
                freed = 0
                await asyncio.to_thread(give_back_freed_memory)

    def load(self, key: str) -> None:
        if self.eviction is not None:
            self.eviction.load(key)

    def _readable(self, key: str) -> Rollout:
        if self.eviction is not None and key in self.eviction.evicted:
            return self.eviction.read(key)
        return super()._readable(key)

    def variant_of(self, key: str) -> LiveVariant | None:
        rollout = self.store.rollouts.get(key)
        return self.variants.get(rollout.variant) if rollout is not None else None

    def cancel_rollout(self, key: str) -> bool:
        variant = self.variant_of(key)
        return variant is not None and variant.cancel_rollout(key)

    async def wait(self) -> None:
        """Until every variant has settled."""
        await asyncio.gather(*(variant.wait() for variant in self.variants.values()))

    async def shutdown(self, on_progress: Callable[[str], None] = lambda _: None) -> None:
        active = [v for v in self.variants.values() if v.can_cancel]
        for variant in active:
            if variant.state is not VariantState.CANCELLING:
                variant.cancel()
        while any(v.state is VariantState.CANCELLING or v.state.active for v in active):
            on_progress(self._shutdown_progress(active))
            await asyncio.sleep(0.1)
        for variant in self.variants.values():
            await variant.stop(on_progress)
        await self.wait()
        on_progress("every server stopped")
        if self._evicting is not None:
            self._evicting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._evicting
        if self.recorder is not None:
            await asyncio.to_thread(self.recorder.close)  # its last write and fsync block
        self._release()

    def _shutdown_progress(self, variants: list[LiveVariant]) -> str:
        parts = []
        for variant in variants:
            text = f"{variant.name}: {variant.state.value}"
            if variant.escalation:
                text += f" ({variant.escalation[-1].detail})"
            if (left := variant.grace_left()) is not None:
                text += f", grace {left:.1f}s left"
            parts.append(text)
        return "; ".join(parts)
