"""Where tracewatch keeps its state, and how it writes there: one place for the home
folder, recordings and session folders. Every folder tracewatch creates is 0700 and
every file 0600 whatever the umask, because they hold whole transcripts."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

from tracewatch.core.errors import TracewatchError
from tracewatch.core.text import UNSAFE

RECORDING_SUFFIX = ".twrec"
"""What a recording's file name ends with (`tracewatch open` tells a recording from a run folder by it)."""


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
    return trusted_state_dir("recordings") / f"{_stamp()}{RECORDING_SUFFIX}"


def _stamp() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


DEFAULT_KEEP_SESSIONS = 20
"""How many session folders are kept (config `keep_sessions`, `--keep`)."""
LOCK_NAME = "tracewatch.lock"
_SESSION_NAME = re.compile(r"(\d{8})-(\d{6})-(\d+)\Z")


def sessions_root() -> Path:
    return tracewatch_home() / "sessions"


def new_session_dir() -> Path:
    """Where one session keeps its captures, outcome records and exports."""
    return trusted_state_dir("sessions") / _stamp()


def trusted_state_dir(name: str) -> Path:
    """`tracewatch_home() / name`, once the home and that folder, where they exist, are
    ones only this user controls (ssh's StrictModes, for the same reason): whoever can
    swap a link in or write beside our files there can redirect or read transcripts.
    Missing ones are left for `make_private_dirs`, which creates them 0700."""
    home = tracewatch_home()
    for folder in (home, home / name):
        _refuse_untrusted(folder)
    return home / name


def _refuse_untrusted(folder: Path) -> None:
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return
    why = None
    if stat.S_ISLNK(info.st_mode):
        why = "is a symlink"
    elif not stat.S_ISDIR(info.st_mode):
        why = "is not a directory"
    elif info.st_uid != os.getuid():
        why = f"belongs to another user (uid {info.st_uid})"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"is writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    if why is not None:
        raise PrivatePathError(
            f"{folder} {why}, so someone else could redirect or read what tracewatch writes there; "
            "refusing it (make it a directory of your own, mode 700, or set TRACEWATCH_HOME to one)"
        )


def file_name(text: str) -> str:
    """`text` as one file name that stays in its folder: path separators, control and
    direction characters become "_", and a leading dot too (no "..", no hidden file).
    Config names are checked already; names read back from a recording are not."""
    name = "".join("_" if c in "/\\" or not c.isprintable() or UNSAFE.match(c) else c for c in text)
    return "_" + name[1:] if name.startswith(".") or not name else name


def claim_session(path: Path) -> int:
    """Create a session folder (private) and lock it for as long as the returned
    descriptor is open: the kernel drops the lock when this process ends, however it
    ends, so a held lock means a session that is running."""
    private_dir(path)
    fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def prune_sessions(keep: int, root: Path | None = None) -> list[Path]:
    """Delete the session folders under `root` (default: ours) beyond the newest `keep`,
    never one that is running (its lock is held), never anything not named like a
    session folder; return what was deleted. A folder that cannot be deleted is left."""
    root = root or sessions_root()
    try:
        folders = [p for p in root.iterdir() if _SESSION_NAME.match(p.name) and p.is_dir() and not p.is_symlink()]
    except OSError:
        return []

    def newest_first(path: Path) -> tuple[str, str, int]:
        day, clock, pid = _SESSION_NAME.match(path.name).groups()  # type: ignore[union-attr]
        return day, clock, int(pid)

    deleted = []
    for folder in sorted(folders, key=newest_first, reverse=True)[keep:]:
        try:
            fd = os.open(folder / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            fd = None  # from before locks, or never started: nothing holds it
        except OSError:
            continue
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: a running session
            shutil.rmtree(folder)
            deleted.append(folder)
        except OSError:
            continue
        finally:
            if fd is not None:
                os.close(fd)
    return deleted


class PrivatePathError(TracewatchError, OSError):
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
    """Write `text` to a file only its owner can read, as `private_output` does."""
    with private_output(path) as out:
        out.write(text)
    return Path(path)


@contextmanager
def private_output(path_out: str | os.PathLike[str]) -> Iterator[TextIO]:
    """A text file that appears at `path_out` only when written whole and is private
    (0600 whatever the umask). It is written to a new file of a name nobody could
    guess, created exclusively and never through a link, then renamed over `path_out`
    (a rename replaces a link there rather than writing through it): a file or link
    planted beside the output can neither receive the text nor be truncated."""
    path_out = Path(path_out)
    fd, partial = tempfile.mkstemp(dir=path_out.parent, prefix=f".{path_out.name}.", suffix=".partial")
    try:
        with open(fd, "w", encoding="utf-8") as out:
            os.fchmod(fd, 0o600)
            yield out
        os.replace(partial, path_out)
    except BaseException:
        os.unlink(partial)
        raise


def open_regular(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """Open a file for reading only if it is a regular file, else raise `OSError`
    saying what it is: a FIFO would block until someone writes to it (it is never
    opened: looked at first, then opened non-blocking, so a swap between the two
    cannot block either) and a device such as /dev/zero never ends."""
    info = os.stat(path)
    if stat.S_ISREG(info.st_mode):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            os.set_blocking(fd, True)
            return open(fd, "rb")
        os.close(fd)
    raise OSError(f"{path} is {file_kind(info.st_mode)}; expected {what} in a regular file")


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in a message's words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (a named pipe), not a regular file"
    if stat.S_ISCHR(mode):
        return "a character device, not a regular file"
    if stat.S_ISBLK(mode):
        return "a block device, not a regular file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a regular file"
    return "not a regular file"
