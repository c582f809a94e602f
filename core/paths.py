"""Where tracewatch keeps its state, and how it writes there: one place for the home
folder, recordings and session folders. Every folder tracewatch creates is 0700 and
every file 0600 whatever the umask, because they hold whole transcripts."""

from __future__ import annotations

import os
import stat
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


class PrivatePathError(OSError):
    """A folder that cannot be made private safely; the message names it."""


def make_private_dirs(path: str | os.PathLike[str]) -> Path:
    """Create `path` and its missing parents, each 0700 whatever the umask. Folders
    that already exist are left as they are: a user's own folder is not ours to change."""
    path = Path(path)
    missing = []
    walk = path
    while not os.path.lexists(walk) and walk != walk.parent:
        missing.append(walk)
        walk = walk.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue
        os.chmod(folder, 0o700)  # mkdir's mode is masked by the umask; chmod's is not
    return path


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Return `path` as a directory only its owner can enter, creating it (and its
    missing parents) 0700 if missing.

    An existing directory of ours that is wider than 0700 is tightened rather than
    refused: it is where transcripts go, so it must be private either way.
    """
    path = make_private_dirs(path)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise PrivatePathError(f"directory {path} is a symlink or not a directory; refusing it")
    if info.st_uid != os.getuid():
        raise PrivatePathError(f"directory {path} belongs to another user; choose one of yours")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def write_private(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to a file only its owner can read (0600 whatever the umask, even if
    it existed wider), never through a symlink."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "w", encoding="utf-8") as handle:
        os.fchmod(fd, 0o600)
        handle.write(text)
    return path
