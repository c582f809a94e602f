"""Reading files another process is writing, safely and a bounded piece at a time.

Every file is looked at with `lstat` before it is opened: a symbolic link is never
followed and a FIFO, socket or device is never opened (opening a FIFO would wait for a
writer, and would release a writer waiting for a reader). The open itself refuses links
(`O_NOFOLLOW`) and cannot block (`O_NONBLOCK`), and the opened file is checked to be the
regular file looked at, so a swap between the look and the open is caught too.

`LineTail` reads an append-only JSONL file the way prime-rl's writers leave it: whole
lines only (a torn last line waits for the next read), blank lines skipped, a line
longer than its bound skipped and counted, and a file that shrank or was replaced read
again from its start.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tracewatch.core.errors import TracewatchError

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotReadable(TracewatchError, OSError):
    """A path that is not a regular file we may read; `str()` says what it is."""


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISLNK(mode):
        return "a symbolic link (not followed)"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (not opened)"
    if stat.S_ISSOCK(mode):
        return "a socket (not opened)"
    return "a device (not opened)"


def open_regular(path: str | os.PathLike[str], dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """A read-only descriptor on the regular file `path` and its stat; FileNotFoundError
    when it is gone, `NotReadable` when it is anything but a regular file."""
    info = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(info.st_mode):
        raise NotReadable(f"{os.fspath(path)} is {kind_of(info.st_mode)}")
    try:
        fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == 40:  # ELOOP: it became a link since the look
            raise NotReadable(f"{os.fspath(path)} is {kind_of(stat.S_IFLNK)}") from None
        raise
    opened = os.fstat(fd)
    if not stat.S_ISREG(opened.st_mode):
        os.close(fd)
        raise NotReadable(f"{os.fspath(path)} is {kind_of(opened.st_mode)}")
    return fd, opened


def read_small(path: str | os.PathLike[str], limit: int, dir_fd: int | None = None) -> bytes:
    """A whole small regular file (a placeholder, the eval plan); `NotReadable` when
    it is larger than `limit` bytes or not a regular file."""
    fd, info = open_regular(path, dir_fd)
    try:
        if info.st_size > limit:
            raise NotReadable(f"{os.fspath(path)} is {info.st_size} bytes, more than the {limit} a file of its kind may be")
        return os.pread(fd, limit + 1, 0)[:limit]
    finally:
        os.close(fd)


@dataclass
class Lines:
    """What one `LineTail.read` gave."""

    lines: list[bytes] = field(default_factory=list)
    """Whole, non-blank lines, without their newline."""
    restarted: bool = False
    """The file shrank or was replaced: these lines are from its start, and whatever
    was read from it before is void."""
    more: bool = False
    """The byte budget ran out before the end of the file."""
    problem: str | None = None
    """Why the file cannot be read now (it is a link, a FIFO, ...)."""


class LineTail:
    """An append-only file of lines read a bounded piece at a time (`read`)."""

    def __init__(self, path: Path, max_line: int) -> None:
        self.path = path
        self.max_line = max_line
        self.offset = 0
        """Bytes consumed: every whole line before it has been handed out."""
        self.lines_read = 0
        """Lines handed out or skipped since the file's start (a line's number is this + 1)."""
        self.overlong = 0
        """Lines longer than `max_line`, skipped."""
        self._identity: tuple[int, int] | None = None
        self._skipping = False
        """Inside an over-long line: bytes are dropped up to its newline."""
        self.caught_up = False
        """The last read reached the end of the file (but for a torn last line)."""

    @property
    def exists(self) -> bool:
        return self._identity is not None

    def read(self, max_bytes: int) -> Lines:
        """The whole lines written since the last read, up to about `max_bytes` of them
        (at least one line, however long, up to `max_line`)."""
        got = Lines()
        self.caught_up = True
        try:
            looked = os.stat(self.path, follow_symlinks=False)
            if (looked.st_dev, looked.st_ino) == self._identity and looked.st_size == self.offset:
                return got  # nothing new: not even an open
        except OSError:
            pass  # the open below says what is wrong
        try:
            fd, info = open_regular(self.path)
        except FileNotFoundError:
            return got
        except OSError as error:
            got.problem = str(error) if isinstance(error, NotReadable) else f"{self.path} cannot be read ({error.strerror or error})"
            return got
        try:
            identity = (info.st_dev, info.st_ino)
            if identity != self._identity or info.st_size < self.offset:
                got.restarted = self._identity is not None
                self._identity, self.offset, self.lines_read, self.overlong, self._skipping = identity, 0, 0, 0, False
            self._read_lines(fd, info.st_size, max_bytes, got)
        finally:
            os.close(fd)
        return got

    def _read_lines(self, fd: int, size: int, max_bytes: int, got: Lines) -> None:
        budget = max(max_bytes, 1)
        while self.offset < size and budget > 0:
            want = min(size - self.offset, max(budget, 1 << 16))
            data = os.pread(fd, want, self.offset)
            if not data:
                return
            end = data.rfind(b"\n")
            if end < 0:
                if self._skipping or len(data) > self.max_line:
                    self._skip_long(len(data))
                    budget -= len(data)
                    continue
                if len(data) < size - self.offset and want < self.max_line + 1:
                    # a line longer than the budget: read on until its end, within the bound
                    data = os.pread(fd, min(size - self.offset, self.max_line + 1), self.offset)
                    end = data.rfind(b"\n")
                    if end < 0:
                        if len(data) > self.max_line:
                            self._skip_long(len(data))
                            continue
                        return
                else:
                    return  # a torn last line: it waits for the rest
            self._take(data[: end + 1], got)
            budget -= end + 1
        got.more = self.offset < size and budget <= 0
        self.caught_up = not got.more

    def _skip_long(self, length: int) -> None:
        if not self._skipping:
            self.overlong += 1
            self.lines_read += 1
            self._skipping = True
        self.offset += length

    def _take(self, block: bytes, got: Lines) -> None:
        """Consume `block` (whole lines, ending in a newline)."""
        self.offset += len(block)
        lines = block.split(b"\n")
        lines.pop()
        if self._skipping:
            lines.pop(0)  # the rest of the over-long line
            self._skipping = False
        self.lines_read += len(lines)
        limit = self.max_line
        for line in lines:
            if len(line) > limit:
                self.overlong += 1
            elif line and not line.isspace():
                got.lines.append(line)
