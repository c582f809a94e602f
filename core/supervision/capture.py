"""Private capture files for a supervised child's stdout and stderr.

A variant's output holds whole transcripts, so the files are the user's alone
(0600 inside a 0700 directory), are never opened through a symlink someone else
planted, and start with one provenance line so a log copied out for diagnosis
still says which invocation wrote it. The app's log pane reads only the tail,
because a capture can grow to gigabytes while it is being watched.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from datetime import datetime
from pathlib import Path

from tracewatch.core.errors import TracewatchError

_CHUNK = 1 << 20


class CaptureError(TracewatchError, OSError):
    """A capture file or directory that cannot be used safely; the message names it."""


def provenance_line(label: str, stream: str, argv_digest: str, started: datetime) -> str:
    """The first line of a capture file; whitespace in the label is folded so it stays one field."""
    name = "_".join(label.split()) or "-"
    return f"# tracewatch {name} {stream}; argv-digest {argv_digest}; started {started.isoformat()}\n"


def open_capture(path: str | os.PathLike[str], first_line: str) -> int:
    """Create (or truncate) one capture file, write `first_line`, and return its descriptor.

    O_NOFOLLOW refuses a planted symlink; a hard link or a non-regular file is refused
    before anything is truncated, so a capture can never overwrite someone else's file.
    """
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise CaptureError(f"capture file {path} is a symlink; refusing to write through it") from None
        raise CaptureError(f"cannot open capture file {path}: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise CaptureError(f"capture file {path} is not a plain file of its own; refusing it")
        os.set_blocking(fd, True)
        os.fchmod(fd, 0o600)
        os.ftruncate(fd, 0)
        os.write(fd, first_line.encode("utf-8"))
    except BaseException:
        os.close(fd)
        raise
    return fd


def file_digest(path: str | os.PathLike[str]) -> tuple[str, int]:
    """Return (sha256 hex, size) of a capture file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def tail_lines(path: str | os.PathLike[str], n: int, max_bytes: int = 65536) -> list[str]:
    """Return the last `n` lines among the final `max_bytes` of a capture file.

    Only the end is read, however large the file. A line cut by the window's start
    is dropped rather than shown half; the last line may be one still being written.
    Lines are raw text: the caller renders them as literal data.
    """
    if n <= 0:
        return []
    with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        start = max(0, size - max_bytes)
        # one byte before the window tells whether its first line starts cleanly
        handle.seek(max(0, start - 1))
        data = handle.read(size - start + (1 if start else 0))
    if start:
        data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines[-n:]
