"""In-flight traces: `traces/live/<trace_id>.jsonl` folded as they grow.

prime-rl's orchestrator appends every verifiers wire delta of a live trace to its file
(each line followed by a blank line), the first line, the trace's `open` delta,
carrying the episode's dispatch identity under `dispatch`. The file is deleted when the
episode retires (its record lands in the stream at about the same time, before or
after) or when a retry discards the trace. A dispatched episode with no trace streaming
yet is a placeholder `live/pending/<dispatch_id>.json` holding the identity alone.

`LiveFollower.poll` folds what each file gained since the last poll through tracewatch's
own `EpisodeAssembly` (every delta checked at the boundary), a bounded number of bytes
per call. It looks only at what changed: the folders are listed again only when their
modification time moved (or may have moved within the clock's granularity), and a file
is read only when its size grew; with nothing changing a poll costs one `stat` per file.
A torn last line waits for the next poll; a file that shrank or was replaced (same
name, new inode) is a new attempt, folded again from its start.

Hostile input costs one row: a symbolic link, a FIFO or a device in `live/` is refused
without being opened or followed, and a file that is not JSON, not UTF-8, has a line
longer than `MAX_LINE`, lacks its `open` delta (prime-rl drops the oldest deltas past
its buffer cap), or holds a delta the assembly refuses, stops folding with `error`
saying why; what was folded before stays readable.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson

from tracewatch.core.recordings.prime_rl.files import NotReadable, kind_of, open_regular, read_small
from tracewatch.core.text import short_repr
from tracewatch.core.wire.assembly import AssemblyError, EpisodeAssembly
from tracewatch.core.wire.protocol import WireDelta

LIVE_SUFFIX = ".jsonl"
PLACEHOLDER_SUFFIX = ".json"
MAX_LINE = 64 << 20
"""The longest delta line folded: a turn of tens of thousands of tokens is a few MB."""
MAX_PLACEHOLDER = 1 << 16
READ_BYTES = 8 << 20
"""What one `poll` reads at most by default (at least one line of one file)."""
RACY_NS = 200_000_000
"""A folder modified this close to when it was listed may have changed again within the
filesystem clock's granularity (a few ms): it is listed again at the next poll."""
STAGES = ("pending", "boot", "setup", "running", "finalize", "scoring", "done", "error")
_SPAN_STAGES = (("scoring", "scoring"), ("finalize", "finalize"), ("agent", "running"), ("setup", "setup"), ("boot", "boot"))


@dataclass(frozen=True, slots=True)
class Dispatch:
    """The orchestrator's identity of a dispatched episode (prime-rl's `dispatch_info`).
    A field of the wrong type reads as None."""

    id: str | None
    """The dispatcher's id: a placeholder's file stem; not a trace or episode id.
    Absent in the oldest prime-rl versions."""
    kind: str | None
    """`train` or `eval`."""
    env: str | None
    group: str | None
    task: str | None
    """The task's name, or `idx=N`."""
    step: int | None
    """For train, the orchestrator's step when scheduled; for eval, the eval step."""
    policy_version: int | None
    started: float | None
    """Epoch seconds when it was dispatched."""

    @classmethod
    def parse(cls, value: Any) -> Dispatch | None:
        if type(value) is not dict:
            return None

        def text(key: str) -> str | None:
            item = value.get(key)
            return item if type(item) is str else None

        def whole(key: str) -> int | None:
            item = value.get(key)
            return item if type(item) is int else None

        started: Any = value.get("started")
        return cls(
            text("id"), text("kind"), text("env"), text("group"), text("task"), whole("step"), whole("policy_version"),
            float(started) if type(started) in (int, float) and abs(started) < 1e12 else None,
        )


def stage(trace: Mapping[str, Any] | None) -> str:
    """prime-rl's stage of a folded trace: `error` once it has errors, `done` once
    scoring ended, else the latest timing span that started, else `pending`."""
    if trace is None:
        return "pending"
    if trace.get("errors"):
        return "error"
    timing = trace.get("timing")
    if not isinstance(timing, Mapping):
        return "pending"
    scoring = timing.get("scoring")
    if isinstance(scoring, Mapping) and scoring.get("end"):
        return "done"
    for span, name in _SPAN_STAGES:
        item = timing.get(span)
        if isinstance(item, Mapping) and item.get("start"):
            return name
    return "pending"


class LiveTrace:
    """One live file, folded so far."""

    __slots__ = ("trace_id", "dispatch", "trace", "error", "version", "attempt", "lines", "row")

    def __init__(self, trace_id: str) -> None:
        self.trace_id = trace_id
        self.dispatch: Dispatch | None = None
        """From the file's first line; None until it is read (or if it had none)."""
        self.trace: dict[str, Any] | None = None
        """The trace as assembled (verifiers' python-mode `Trace` dump plus `pending`;
        committed nodes and calls packed, `PackedList`); None until its `open` delta."""
        self.error: str | None = None
        """Why folding stopped (the file is refused or holds a bad line), in words."""
        self.version = 0
        """Bumped whenever anything above changed."""
        self.attempt = 0
        """Bumped when the file shrank or was replaced and was folded again from its start."""
        self.lines = 0
        """Deltas folded."""
        self.row = -1
        """The finished episode's row once its record landed (set by `PrimeRlRun`);
        the file can linger a moment after that."""

    @property
    def stage(self) -> str:
        return "error" if self.error is not None and self.trace is None else stage(self.trace)

    def __repr__(self) -> str:
        return f"LiveTrace({self.trace_id!r}, stage={self.stage}, lines={self.lines}, error={self.error!r})"


@dataclass(frozen=True, slots=True)
class Placeholder:
    """A dispatched episode with no trace streaming yet (`live/pending/<id>.json`)."""

    dispatch_id: str
    dispatch: Dispatch | None
    error: str | None = None


@dataclass
class LiveChanges:
    """What one `poll` saw."""

    changed: list[LiveTrace] = field(default_factory=list)
    """New files, files that folded something new, started over, or went bad."""
    vanished: list[LiveTrace] = field(default_factory=list)
    """Files deleted: the episode retired (its record lands in the stream about now)
    or a retry discarded the trace."""
    placed: list[Placeholder] = field(default_factory=list)
    unplaced: list[Placeholder] = field(default_factory=list)
    more: bool = False
    """The byte budget ran out: poll again soon for the rest."""
    _noted: set[str] = field(default_factory=set, repr=False)

    def note(self, live: LiveTrace) -> None:
        """`live` changed (listed once however often)."""
        if live.trace_id not in self._noted:
            self._noted.add(live.trace_id)
            self.changed.append(live)

    def merge(self, later: LiveChanges) -> None:
        """Take in what a later poll saw (this poll's budget ran out: `more`)."""
        for live in later.changed:
            self.note(live)
        self.vanished += later.vanished
        self.placed += later.placed
        self.unplaced += later.unplaced
        self.more = later.more

    def __bool__(self) -> bool:
        return bool(self.changed or self.vanished or self.placed or self.unplaced)


class _File:
    __slots__ = ("live", "inode", "consumed", "assembly", "stuck")

    def __init__(self, live: LiveTrace, inode: int) -> None:
        self.live, self.inode = live, inode
        self.consumed = 0
        self.assembly = EpisodeAssembly()
        self.stuck = False
        """Folding stopped (`live.error`): read again only if the file starts over."""


class _Listing:
    """A folder listed only when its modification time moved."""

    __slots__ = ("path", "mtime", "racy")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mtime: int | None = None
        self.racy = True

    def changed(self, info: os.stat_result) -> bool:
        if info.st_mtime_ns == self.mtime and not self.racy:
            return False
        self.mtime = info.st_mtime_ns
        self.racy = time.time_ns() - info.st_mtime_ns < RACY_NS
        return True


class LiveFollower:
    """The live folder of a run, followed by `poll`."""

    def __init__(self, live: Path, pending: Path) -> None:
        self.live_dir, self.pending_dir = live, pending
        self.traces: dict[str, LiveTrace] = {}
        """Every live file present at the last poll, by trace id."""
        self.placeholders: dict[str, Placeholder] = {}
        self._files: dict[str, _File] = {}
        self._placeholder_inodes: dict[str, int] = {}
        self._live_listing, self._pending_listing = _Listing(live), _Listing(pending)
        self._folder: tuple[int, int] | None = None
        self._turn = 0
        """Where the next poll starts reading, so a big file cannot starve the others."""
        self.fold: Callable[[LiveTrace, EpisodeAssembly, WireDelta], dict[str, Any]] | None = None
        """Folds each delta in the follower's place (the trace, its file's assembly, the
        delta) into that assembly and returns the trace as folded: a session's store
        folds the rows it shows itself (`RolloutStore.apply_delta` into the same
        assembly), so a file is folded once. A file folded again from its start
        (`LiveTrace.attempt`) comes with a new assembly."""

    def visible_placeholders(self) -> list[Placeholder]:
        """Placeholders but those whose dispatch already streams a trace (the
        placeholder is on its way out), by dispatch time."""
        streaming = {live.dispatch.id for live in self.traces.values() if live.dispatch is not None and live.dispatch.id}
        shown = [p for p in self.placeholders.values() if p.dispatch_id not in streaming]
        return sorted(shown, key=lambda p: (p.dispatch is None or p.dispatch.started is None, p.dispatch.started if p.dispatch else 0))

    def poll(self, max_bytes: int = READ_BYTES) -> LiveChanges:
        changes = LiveChanges()
        try:
            fd = os.open(self.live_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            self._gone(changes)
            return changes
        try:
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != self._folder:
                self._gone(changes)  # a relaunch removed the folder and made a new one
                self._folder = (info.st_dev, info.st_ino)
                self._live_listing = _Listing(self.live_dir)
            if self._live_listing.changed(info):
                self._list(fd, changes)
            self._read(fd, max_bytes, changes)
        finally:
            os.close(fd)
        self._poll_placeholders(changes)
        return changes

    def _gone(self, changes: LiveChanges) -> None:
        for name in list(self._files):
            self._forget(name, changes)
        for dispatch_id in list(self.placeholders):
            changes.unplaced.append(self.placeholders.pop(dispatch_id))
        self._placeholder_inodes.clear()
        self._pending_listing = _Listing(self.pending_dir)

    def _forget(self, name: str, changes: LiveChanges) -> None:
        gone = self._files.pop(name)
        self.traces.pop(gone.live.trace_id, None)
        changes.vanished.append(gone.live)

    def _list(self, fd: int, changes: LiveChanges) -> None:
        present = {}
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.name.endswith(LIVE_SUFFIX) and len(entry.name) > len(LIVE_SUFFIX):
                    present[entry.name] = entry
        for name in [name for name in self._files if name not in present]:
            self._forget(name, changes)
        for name, entry in present.items():
            if name in self._files:
                continue
            live = LiveTrace(name[: -len(LIVE_SUFFIX)])
            self._files[name] = _File(live, entry.inode())
            self.traces[live.trace_id] = live
            if not entry.is_file(follow_symlinks=False):
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    mode = stat.S_IFLNK if entry.is_symlink() else stat.S_IFIFO
                self._stop(self._files[name], f"{name} is {kind_of(mode)}")
            live.version += 1
            changes.note(live)

    def _read(self, fd: int, max_bytes: int, changes: LiveChanges) -> None:
        names = list(self._files)
        if not names:
            return
        start = self._turn % len(names)
        budget = max_bytes
        for name in names[start:] + names[:start]:
            if budget <= 0:
                changes.more = True
                self._turn = names.index(name)
                return
            budget -= self._read_file(fd, name, changes)
        self._turn = 0

    def _read_file(self, fd: int, name: str, changes: LiveChanges) -> int:
        """Fold what `name` gained; the bytes read."""
        file = self._files[name]
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            self._forget(name, changes)
            return 0
        if info.st_ino != file.inode or info.st_size < file.consumed:
            file = self._restart(name, info.st_ino)
            changes.note(file.live)
        if file.stuck or info.st_size == file.consumed:
            return 0
        if not stat.S_ISREG(info.st_mode):
            self._stop(file, f"{name} is {kind_of(info.st_mode)}")
            changes.note(file.live)
            return 0
        try:
            data = self._new_bytes(fd, name, file, info.st_size)
        except FileNotFoundError:
            self._forget(name, changes)
            return 0
        except OSError as error:
            self._stop(file, str(error) if isinstance(error, NotReadable) else f"{name} cannot be read ({error.strerror or error})")
            changes.note(file.live)
            return 0
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) > MAX_LINE:
                self._stop(file, f"line {file.live.lines + 1} is longer than {MAX_LINE >> 20} MiB: not read")
                changes.note(file.live)
            return len(data)
        before = file.live.version
        self._fold(file, data[: end + 1])
        if file.live.version != before:
            changes.note(file.live)
        return len(data)

    def _restart(self, name: str, inode: int) -> _File:
        old = self._files[name].live
        live = LiveTrace(old.trace_id)
        live.attempt, live.version = old.attempt + 1, old.version + 1
        file = self._files[name] = _File(live, inode)
        self.traces[live.trace_id] = live
        return file

    def _new_bytes(self, fd: int, name: str, file: _File, size: int) -> bytes:
        """The bytes after `consumed`, up to the end (at most one line past `MAX_LINE`)."""
        handle, info = open_regular(name, dir_fd=fd)
        try:
            if info.st_ino != file.inode:
                raise FileNotFoundError(name)  # replaced since the stat: the next poll starts it over
            return os.pread(handle, min(size - file.consumed, MAX_LINE + 1), file.consumed)
        finally:
            os.close(handle)

    def _fold(self, file: _File, block: bytes) -> None:
        live = file.live
        for line in block.split(b"\n")[:-1]:
            file.consumed += len(line) + 1
            if not line or line.isspace():
                continue
            if len(line) > MAX_LINE:
                self._stop(file, f"line {live.lines + 1} is longer than {MAX_LINE >> 20} MiB: not read")
                return
            problem = self._apply(file, line)
            if problem is not None:
                self._stop(file, f"delta {live.lines + 1}: {problem}")
                return
            live.lines += 1
            live.version += 1

    def _apply(self, file: _File, line: bytes) -> str | None:
        """Fold one delta line; why not, if it cannot be."""
        live = file.live
        try:
            delta = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            return f"not JSON ({error})"
        if type(delta) is not dict:
            return f"not a delta: {short_repr(delta)}"
        if delta.get("trace") != live.trace_id:
            return f"names trace {short_repr(delta.get('trace'))}, but the file is {live.trace_id!r}'s"
        if live.trace is None:
            if "open" not in delta:
                return "the file does not start with the trace's open delta (was it dropped past prime-rl's buffer cap?)"
            live.dispatch = Dispatch.parse(delta.pop("dispatch", None))
        try:
            live.trace = self.fold(live, file.assembly, cast(WireDelta, delta)) if self.fold is not None else file.assembly.apply(delta)
        except AssemblyError as error:
            return str(error)
        except Exception as error:  # noqa: BLE001 - one bad file is one bad row, never a traceback
            return f"cannot be folded ({type(error).__name__}: {short_repr(str(error), 200)})"
        return None

    def _stop(self, file: _File, reason: str) -> None:
        file.stuck = True
        file.live.error = reason
        file.live.version += 1

    def _poll_placeholders(self, changes: LiveChanges) -> None:
        try:
            fd = os.open(self.pending_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            for dispatch_id in list(self.placeholders):
                changes.unplaced.append(self.placeholders.pop(dispatch_id))
            self._placeholder_inodes.clear()
            return
        try:
            if self._pending_listing.changed(os.fstat(fd)):
                self._list_placeholders(fd, changes)
        finally:
            os.close(fd)

    def _list_placeholders(self, fd: int, changes: LiveChanges) -> None:
        present: dict[str, os.DirEntry[str]] = {}
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.name.endswith(PLACEHOLDER_SUFFIX) and len(entry.name) > len(PLACEHOLDER_SUFFIX):
                    present[entry.name[: -len(PLACEHOLDER_SUFFIX)]] = entry
        for dispatch_id in list(self.placeholders):
            listed = present.get(dispatch_id)
            if listed is None or listed.inode() != self._placeholder_inodes[dispatch_id]:
                self._placeholder_inodes.pop(dispatch_id)
                changes.unplaced.append(self.placeholders.pop(dispatch_id))
        for dispatch_id, entry in present.items():
            if dispatch_id in self.placeholders:
                continue
            placeholder = _placeholder(fd, dispatch_id, entry)
            if placeholder is None:
                continue
            self.placeholders[dispatch_id] = placeholder
            self._placeholder_inodes[dispatch_id] = entry.inode()
            changes.placed.append(placeholder)


def _placeholder(fd: int, dispatch_id: str, entry: os.DirEntry[str]) -> Placeholder | None:
    """The placeholder in `entry`; None if it vanished before it could be read."""
    try:
        data = read_small(entry.name, MAX_PLACEHOLDER, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError as error:
        return Placeholder(dispatch_id, None, str(error) if isinstance(error, NotReadable) else f"{entry.name} cannot be read ({error.strerror or error})")
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        return Placeholder(dispatch_id, None, f"{entry.name}: not JSON ({error})")
    dispatch = Dispatch.parse(value)
    return Placeholder(dispatch_id, dispatch, None if dispatch is not None else f"{entry.name}: not a dispatch: {short_repr(value)}")
