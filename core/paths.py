"""Where tracewatch keeps its state: one place for the home folder, recordings and
session folders, each created private (0700) whatever the umask."""

from __future__ import annotations

import os
import time
from pathlib import Path

from core.recordings.format import SUFFIX


def tracewatch_home() -> Path:
    """`$TRACEWATCH_HOME`, else `$XDG_STATE_HOME/tracewatch`, else
    `~/.local/state/tracewatch`: recordings are state, not config or cache."""
    home = os.environ.get("TRACEWATCH_HOME")
    if home:
        return Path(home).expanduser()
    state = os.environ.get("XDG_STATE_HOME")
    # the XDG spec says to ignore a relative value
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "tracewatch"


def default_recording_path() -> Path:
    return tracewatch_home() / "recordings" / f"{_stamp()}{SUFFIX}"


def _stamp() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def new_session_dir() -> Path:
    """Where one session keeps its captures, outcome records and exports."""
    return tracewatch_home() / "sessions" / _stamp()
