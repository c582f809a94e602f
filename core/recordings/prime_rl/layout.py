"""Where a prime-rl run's files are, from whichever folder the user named.

prime-rl's file monitor writes everything under `<out>/monitors/file/` (`metrics.jsonl`,
`plan.json`, `traces/`); a run from before that package wrote `<out>/traces/` directly,
and the oldest wrote `<out>/rollouts/step_N/...` (read by `prime_rl_dir`). RUN may be
the output dir, its `monitors/file/` folder or its `traces/` folder. Nothing here needs
the files to exist yet: a run that has only started has a `monitors/file/` with no
traces in it, and every reader waits for its file to appear.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tracewatch.core.errors import TracewatchError
from tracewatch.core.recordings.prime_rl_dir import rollouts_dir

MONITOR = Path("monitors") / "file"
TRACES = "traces"
TRACE_PARTS = ("stream.index.jsonl", "stream", "live", "annotations", "stream.jsonl")
"""What the monitor puts in `traces/`: any one of them makes the folder a run's."""
SHOWN = 12
"""Names listed when a folder is not a run."""


class PrimeRlLayoutError(TracewatchError, ValueError):
    """A folder that is no prime-rl run; the message says what was found instead."""


@dataclass(frozen=True)
class StreamRun:
    """The files of a run in the stream layout (`traces/stream/` and its siblings)."""

    traces: Path
    """`<out>/monitors/file/traces` (or `<out>/traces` in the older layout)."""
    monitor: Path | None
    """The folder of `metrics.jsonl` and `plan.json`, None when none was found."""
    live: Path
    """In-flight traces: `traces/live`, or `<out>/live` in a flow run (`<out>/flow.json`)."""

    @property
    def stream(self) -> Path:
        """The chunks of the episode stream (`NNNNN.jsonl[.zst]`)."""
        return self.traces / "stream"

    @property
    def index(self) -> Path:
        """One row per finished episode."""
        return self.traces / "stream.index.jsonl"

    @property
    def annotations(self) -> Path:
        """`<producer>/` chunks and `<producer>.index.jsonl` per producer."""
        return self.traces / "annotations"

    @property
    def pending(self) -> Path:
        """Placeholders of dispatched episodes with no trace streaming yet."""
        return self.live / "pending"

    @property
    def metrics(self) -> Path | None:
        return None if self.monitor is None else self.monitor / "metrics.jsonl"

    @property
    def plan(self) -> Path | None:
        return None if self.monitor is None else self.monitor / "plan.json"


@dataclass(frozen=True)
class RolloutsRun:
    """A run in the oldest layout: its `rollouts/` folder, read by `prime_rl_dir`."""

    rollouts: Path


def detect(path: str | os.PathLike[str]) -> StreamRun | RolloutsRun | None:
    """The prime-rl run at `path` in either layout, or None when `path` holds neither."""
    path = Path(path)
    for out, monitor, traces in _candidates(path):
        if monitor is not None and monitor.is_dir() or _is_traces(traces):
            return _stream_run(out, monitor, traces)
    folder = rollouts_dir(path)
    return RolloutsRun(folder) if folder is not None else None


def find_run(path: str | os.PathLike[str]) -> StreamRun | RolloutsRun:
    """`detect`, or `PrimeRlLayoutError` saying what `path` holds instead."""
    found = detect(path)
    if found is None:
        raise PrimeRlLayoutError(f"{path} is not a prime-rl run: {_what_is_there(Path(path))}")
    return found


def _candidates(path: Path) -> list[tuple[Path | None, Path | None, Path]]:
    """(output dir, monitor folder, traces folder) for each reading of `path`, the
    current layout first."""
    found: list[tuple[Path | None, Path | None, Path]] = [
        (path, path / MONITOR, path / MONITOR / TRACES),
        (path, None, path / TRACES),
    ]
    if path.name == "file" and path.parent.name == "monitors":
        found.append((path.parent.parent, path, path / TRACES))
    if path.name == TRACES:
        parent = path.parent
        if parent.name == "file" and parent.parent.name == "monitors":
            found.append((parent.parent.parent, parent, path))
        else:
            found.append((parent, None, path))
    return found


def _is_traces(folder: Path) -> bool:
    return folder.is_dir() and any((folder / part).exists() for part in TRACE_PARTS)


def _stream_run(out: Path | None, monitor: Path | None, traces: Path) -> StreamRun:
    if monitor is None and out is not None:
        # the older layout's metrics: under monitors/file if that exists, else at the root
        monitor = out / MONITOR if (out / MONITOR).is_dir() else out if (out / "metrics.jsonl").exists() else None
    flow = out is not None and (out / "flow.json").is_file()
    return StreamRun(traces, monitor, out / "live" if flow and out is not None else traces / "live")


def _what_is_there(path: Path) -> str:
    try:
        if not path.exists():
            return "it does not exist"
        if not path.is_dir():
            return "it is a file, not a folder"
        names = sorted(os.listdir(path))
    except OSError as error:
        return f"it cannot be read ({error.strerror or error})"
    if not names:
        return "the folder is empty"
    shown = ", ".join(repr(name) for name in names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    return (
        f"it holds {shown}; expected monitors/file/ (with traces/, metrics.jsonl), traces/ "
        "(with stream.index.jsonl, stream/, live/ or annotations/), or rollouts/step_N/"
    )
