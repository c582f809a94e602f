"""What every kind of session shares (tracewatch.core.engine has them all: live servers, a
replayed recording, a finished run or a recording opened offline): the store, the
selection and what a second screen shows, exporting an episode, and the session
folder's lock."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any

from tracewatch.core.paths import claim_session, file_name, private_dir, write_private
from tracewatch.core.session.contracts import ReplayControls, RunMetrics, VariantView
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.wire.episode_json import episode_json, partial_episode


class Session:
    """The common part of every `SessionView` (tracewatch.core.session.contracts): live servers,
    a replayed recording, or a finished run opened offline."""

    readonly_reason: str | None = None
    """Why start and cancel do nothing here (a replay or an offline run), if so."""
    offline = False
    """Whether this is a finished run opened to be read (`tracewatch open`), not run."""

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
        self._reading: asyncio.Task[None] | None = None
        """The one task that reads the source on while the screen runs (a replay's pace,
        a recording's index, a followed run's files), if the source is not read whole."""

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

    @property
    def run_metrics(self) -> RunMetrics | None:
        """None: only a training run followed writes metrics of its own."""
        return None

    def cap_stall(self, limit: float) -> None:
        self.store.cap_stall(limit)

    async def start(self) -> None:
        for name in self.variants:
            self.store.touch_variant(name)

    async def wait(self) -> None:
        """Until nothing more will arrive: at once for a session that is complete, else
        when its reading ends."""
        if self._reading is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reading

    def _read_on_the_loop(self, reading: Coroutine[Any, Any, None]) -> None:
        self._reading = asyncio.get_running_loop().create_task(reading)

    async def _stop_reading(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
        await Session.wait(self)

    async def shutdown(self, on_progress: Callable[[str], None] = lambda _: None) -> None:
        on_progress("closed")

    def cancel_rollout(self, key: str) -> bool:
        return False

    def user_busy(self) -> None:
        """The user is at the keys (a cursor moved, a filter typed): background work
        that can wait, waits a moment (`FollowedRun`'s reading of steps)."""

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
        return self.recording_stopped or (None if self.recording_path is None else str(self.recording_path))

    @property
    def recording_stopped(self) -> str | None:
        """Why and where recording stopped: only a live session records."""
        return None

    def export_episode(self, key: str, directory: Path | None = None) -> Path:
        """Write one rollout's episode as JSON: the finished record when the run
        replied, else the traces as assembled so far."""
        rollout = self._readable(key)
        record = rollout.record or partial_episode(rollout.task_data, rollout.assembly.traces.values(), rollout.reason)
        path = self.export_text(f"{key.replace('/', '-')}.json", episode_json(record), directory)
        self.exported.append(path)
        return path

    def export_text(self, name: str, text: str, directory: Path | None = None) -> Path:
        """Write a file the user asked for (an episode, a screenshot) where exports go,
        the session's folder or `--export-dir`, so they find it beside the others."""
        directory = directory or self.export_dir
        if directory.is_relative_to(self.session_dir):
            self._claim()
        return write_private(private_dir(directory) / file_name(name), text)

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
