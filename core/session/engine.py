"""Every variant of one session, the store they feed, and the recording they leave.

The app and the headless runner both drive an `Engine`; neither touches a socket or
a process. `shutdown` is the one way out: it cancels every run, stops every child
and waits for them, so quitting leaves nothing running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from core.paths import claim_session, new_session_dir, private_dir, prune_sessions, sessions_root, write_private
from core.recordings.eviction import GIVE_BACK_AFTER, Eviction, give_back_freed_memory
from core.recordings.export import episode_json, partial_episode
from core.session.config import AnyVariantConfig, Config
from core.session.contracts import ReplayControls, SessionView, VariantState, VariantView
from core.session.store import Rollout, RolloutStore
from core.session.variant import Variant
from core.taps.eval_variant import EvalVariant
from core.taps.proxy_variant import ProxyVariant
from core.taps.relay_viewer import RelayViewer

EVICT_EVERY = 0.5
"""Seconds between looks for finished rollouts whose traces may leave memory."""


class Session:
    """The common part of every `SessionView` (core.session.contracts): live servers,
    a replayed recording, or a finished run opened offline."""

    readonly_reason: str | None = None
    """Why start and cancel do nothing here (a replay or an offline run), if so."""

    def __init__(self, store: RolloutStore, session_dir: Path, recording_path: Path | None = None) -> None:
        self.store = store
        self.session_dir = session_dir
        self.recording_path = recording_path
        self.variants: Mapping[str, VariantView] = {}
        self.export_dir = session_dir / "exports"
        """Where `export_episode` writes (`--export-dir`)."""
        self.exported: list[Path] = []
        self.selected: str | None = None
        self.shown: tuple[str, ...] = ()
        """What a second screen (side by side) shows besides the selection."""
        self._lock: int | None = None
        """The session folder's lock while this session uses the folder (see `claim_session`)."""

    @property
    def quit_warning(self) -> str | None:
        """What quitting costs someone else (a proxy's drivers lose their route), if anything."""
        return None

    @property
    def truncated(self) -> str | None:
        """Why a recording read ends early; nothing is read here."""
        return None

    @property
    def replay(self) -> ReplayControls | None:
        return None


    async def start(self) -> None:
        for name in self.variants:
            self.store.touch_variant(name)

    async def wait(self) -> None:
        """Until nothing more will arrive; at once for a session that is complete."""

    async def shutdown(self, on_progress: Callable[[str], None] = lambda _: None) -> None:
        on_progress("closed")

    def cancel_rollout(self, key: str) -> bool:
        return False

    def select(self, key: str | None) -> None:
        """The user looks at this rollout now; a session that loads on demand loads it."""
        self.selected = key
        if key is not None:
            self.load(key)

    def show(self, keys: Iterable[str]) -> None:
        """A second screen (side by side) shows these rollouts now (none: it closed)."""
        self.shown = tuple(keys)
        for key in self.shown:
            self.load(key)

    @property
    def in_view(self) -> set[str]:
        return {*self.shown, *([self.selected] if self.selected is not None else [])}

    def load(self, key: str) -> None:
        """Bring that rollout's traces into memory if they are elsewhere (on disk)."""

    @property
    def recording_note(self) -> str | None:
        """Where this session is recorded, or why recording stopped."""
        return None if self.recording_path is None else str(self.recording_path)

    def export_episode(self, key: str, directory: Path | None = None) -> Path:
        """Write one rollout's episode as JSON: the finished record when the run
        replied, else the traces as assembled so far."""
        rollout = self._readable(key)
        record = rollout.record or partial_episode(rollout.task_data, rollout.assembly.traces.values(), rollout.reason)
        directory = directory or self.export_dir
        if directory.is_relative_to(self.session_dir):
            self._claim()
        directory = private_dir(directory)
        path = write_private(directory / f"{key.replace('/', '-')}.json", episode_json(record))
        self.exported.append(path)
        return path

    def _readable(self, key: str) -> Rollout:
        """The rollout with its traces, wherever they are."""
        return self.store.rollouts[key]

    def _claim(self) -> None:
        """Create the session folder and hold its lock, so no other tracewatch prunes it."""
        if self._lock is None:
            self._lock = claim_session(self.session_dir)

    def _release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


class Engine(Session):
    def __init__(
        self,
        config: Config,
        *,
        recorder: Any = None,
        session_dir: Path | None = None,
    ) -> None:
        super().__init__(
            RolloutStore(stall_seconds=min(v.stall_seconds for v in config.variants)),
            session_dir or new_session_dir(),
            getattr(recorder, "path", None),
        )
        self.config = config
        self.recorder = recorder
        self.variants: dict[str, Variant | ProxyVariant | EvalVariant | RelayViewer] = {
            variant.name: self._variant(variant) for variant in config.variants
        }
        self.eviction = Eviction(self.store, recorder) if recorder is not None else None
        """Finished rollouts leave memory while recorded (`core.recordings.eviction`)."""
        self._evicting: asyncio.Task[None] | None = None

    def _variant(self, config: AnyVariantConfig) -> Variant | ProxyVariant | EvalVariant | RelayViewer:
        if isinstance(config, Variant.config_type):
            return Variant(config, self.store, self.session_dir, self.recorder)
        if config.relay is not None:
            return RelayViewer(config.name, config.relay, self.store, self.recorder)
        if config.proxy is not None:
            return ProxyVariant(config.name, config.proxy.listen, config.proxy.upstream, self.store, self.recorder)
        assert config.eval is not None
        return EvalVariant(
            config.name,
            config.eval,
            self.store,
            self.session_dir,
            self.recorder,
            cwd=config.working_dir(),
            env=config.environment(),
            grace_seconds=config.grace_seconds,
            deadline_seconds=config.deadline_seconds,
        )

    @property
    def quit_warning(self) -> str | None:
        warnings = [v.route_warning for v in self.variants.values() if isinstance(v, ProxyVariant)]
        return "; ".join(w for w in warnings if w) or None

    @property
    def recording_note(self) -> str | None:
        error = getattr(self.recorder, "error", None)
        return f"recording stopped: {error}" if error else super().recording_note

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

    def variant_of(self, key: str) -> Variant | ProxyVariant | EvalVariant | RelayViewer | None:
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
            if isinstance(variant, ProxyVariant) and variant.state.active:
                on_progress(f"{variant.name}: stopping the proxy; {variant.route_warning}")
                await variant.stop()
            elif isinstance(variant, RelayViewer):
                await variant.stop()
        await self.wait()
        on_progress("every server stopped")
        if self._evicting is not None:
            self._evicting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._evicting
        if self.recorder is not None:
            await asyncio.to_thread(self.recorder.close)  # its last write and fsync block
        self._release()

    def _shutdown_progress(self, variants: list[Variant | ProxyVariant | EvalVariant | RelayViewer]) -> str:
        parts = []
        for variant in variants:
            text = f"{variant.name}: {variant.state.value}"
            if variant.escalation:
                text += f" ({variant.escalation[-1].detail})"
            if (left := variant.grace_left()) is not None:
                text += f", grace {left:.1f}s left"
            parts.append(text)
        return "; ".join(parts)


def summary_lines(engine: SessionView) -> list[str]:
    lines = []
    for name, variant in engine.variants.items():
        stats = engine.store.stats(name)
        counts = ", ".join(f"{count} {status}" for status, count in stats.counts.items() if count)
        reward = "n/a" if stats.mean_reward is None else f"{stats.mean_reward:.3f}"
        line = f"{name}: {variant.state.value}; {counts or 'no rollouts'}; mean reward {reward}"
        if variant.reason:
            line += f"; {variant.reason}"
        lines.append(line)
    if engine.store.dropped_frames:
        lines.append(f"frames dropped: {engine.store.dropped_frames} (last: {engine.store.last_drop})")
    if engine.recording_path is not None:
        lines.append(f"recording: {engine.recording_path}")
    if engine.truncated is not None:
        lines.append(f"note: {engine.truncated}")
    return lines
