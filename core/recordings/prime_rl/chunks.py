"""One record read from a chunked stream at its (chunk, offset), plain or sealed.

prime-rl appends records to `NNNNN.jsonl` and, once a chunk is full (or the run ends),
seals it: it writes `NNNNN.jsonl.zst.tmp` as seekable zstd (independent frames of at
most 4 MiB, a seek table at the end), renames it onto `NNNNN.jsonl.zst`, then deletes
the plain file. The offset an index row gives is in the uncompressed bytes, so it holds
before and after the seal. A reader tries the plain file first and the sealed one when
the plain is gone: the rename comes before the delete, so one of them is always there,
and a plain file deleted while it is open still reads to its end. `.zst.tmp` is never
opened. Through the seek table a read decompresses the frame holding the offset (and
the next, when the record runs into it), never the whole chunk.

An older monitor wrote the stream as one plain file (`stream.jsonl`, rows without a
chunk): it is chunk 0.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pyzstd

from tracewatch.core.errors import TracewatchError
from tracewatch.core.recordings.prime_rl.files import NotReadable, open_regular

MAX_RECORD = 256 << 20
"""The longest record line read: an episode of many long turns is tens of MB."""


class RecordUnreadable(TracewatchError, ValueError):
    """A record an index row points at that cannot be read; the message says why."""


def chunk_name(number: int) -> str:
    return f"{number:05d}.jsonl"


def read_record(directory: Path, chunk: int, offset: int, limit: int = MAX_RECORD) -> dict[str, Any]:
    """The JSON object at `offset` of chunk `chunk` of the stream in `directory`."""
    with OpenChunk(directory, chunk) as opened:
        return opened.record_at(offset, limit)


def read_line(directory: Path, chunk: int, offset: int, limit: int = MAX_RECORD) -> bytes:
    """The line at `offset` of chunk `chunk`, without its newline."""
    with OpenChunk(directory, chunk) as opened:
        return opened.line_at(offset, limit)


class OpenChunk:
    """One chunk opened for reading records at offsets (plain if its plain file is
    there, else sealed); reading offsets in ascending order reads the chunk forward,
    each frame decompressed once. `RecordUnreadable` says why it cannot be opened."""

    def __init__(self, directory: Path, chunk: int) -> None:
        if chunk < 0:
            raise RecordUnreadable(f"no chunk {chunk}: a chunk number is not negative")
        self.directory, self.chunk = directory, chunk
        plain = directory / chunk_name(chunk)
        if chunk == 0 and not directory.is_dir():
            plain = directory.with_name(directory.name + ".jsonl")
        self.path = plain
        self._sealed: Any = None
        try:
            self._fd, info = open_regular(plain)
            self.size: int | None = info.st_size
            return
        except FileNotFoundError:
            pass
        except NotReadable as error:
            raise RecordUnreadable(str(error)) from None
        self.path = plain.with_name(plain.name + ".zst")
        try:
            self._fd, _ = open_regular(self.path)
        except FileNotFoundError:
            raise RecordUnreadable(f"chunk {chunk} of {directory} is gone: neither {plain.name} nor {self.path.name} exists") from None
        except NotReadable as error:
            raise RecordUnreadable(str(error)) from None
        self.size = None
        try:
            self._sealed = pyzstd.SeekableZstdFile(open(self._fd, "rb", closefd=False), "rb")
        except (pyzstd.ZstdError, pyzstd.SeekableFormatError, EOFError, OSError) as error:
            os.close(self._fd)
            raise RecordUnreadable(f"{self.path.name} cannot be read as seekable zstd ({error})") from None

    def __enter__(self) -> OpenChunk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sealed is not None:
            self._sealed.close()
            self._sealed = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def record_at(self, offset: int, limit: int = MAX_RECORD) -> dict[str, Any]:
        return _parsed(self.line_at(offset, limit), self.directory, self.chunk, offset)

    def line_at(self, offset: int, limit: int = MAX_RECORD) -> bytes:
        """The line at `offset`, without its newline."""
        if offset < 0:
            raise RecordUnreadable(f"no record at offset {offset} of chunk {self.chunk}: an offset is not negative")
        if self._sealed is None:
            if self.size is not None and offset >= self.size:
                raise RecordUnreadable(f"offset {offset} is past the end of {self.path.name} ({self.size} bytes)")
            return _line(_plain_readline(self._fd, offset, limit + 1), self.path, offset, limit, plain=True)
        try:
            self._sealed.seek(offset)
            if self._sealed.tell() < offset:
                raise RecordUnreadable(f"offset {offset} is past the end of {self.path.name} ({self._sealed.tell()} bytes uncompressed)")
            return _line(self._sealed.readline(limit + 1), self.path, offset, limit, plain=False)
        except (pyzstd.ZstdError, pyzstd.SeekableFormatError, EOFError, OSError) as error:
            raise RecordUnreadable(f"{self.path.name} cannot be read as seekable zstd ({error})") from None


def _plain_readline(fd: int, offset: int, most: int) -> bytes:
    """The bytes from `offset` through the next newline (or `most` of them)."""
    parts, got, at = [], 0, offset
    while got < most:
        block = os.pread(fd, min(1 << 16, most - got), at)
        if not block:
            break
        end = block.find(b"\n")
        if end >= 0:
            parts.append(block[: end + 1])
            break
        parts.append(block)
        got, at = got + len(block), at + len(block)
    return b"".join(parts)


def _line(line: bytes, path: Path, offset: int, limit: int, plain: bool) -> bytes:
    if len(line) > limit:
        raise RecordUnreadable(f"the record at offset {offset} of {path.name} is longer than {limit >> 20} MiB: not read")
    if not line.endswith(b"\n"):
        if not line:
            raise RecordUnreadable(f"offset {offset} is past the end of {path.name}")
        cut = "the writer may still be writing it" if plain else "the chunk ends inside it"
        raise RecordUnreadable(f"the record at offset {offset} of {path.name} is cut short ({cut})")
    return line[:-1]


def _parsed(line: bytes, directory: Path, chunk: int, offset: int) -> dict[str, Any]:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise RecordUnreadable(
            f"chunk {chunk} of {directory.name}, offset {offset}: not a record ({error}); does the row point at a line's start?"
        ) from None
    if type(value) is not dict:
        raise RecordUnreadable(f"chunk {chunk} of {directory.name}, offset {offset}: a {type(value).__name__}, not a record")
    return value


def chunk_numbers(directory: Path) -> dict[int, bool]:
    """Chunk number -> whether it is sealed, from the names in `directory` (`.tmp`
    files are partial seals and do not count)."""
    found: dict[int, bool] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        stem, dot, rest = name.partition(".")
        if not stem.isdigit() or rest not in ("jsonl", "jsonl.zst"):
            continue
        number = int(stem)
        found[number] = found.get(number, True) and rest == "jsonl.zst"
    return found
