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
    return _parsed(read_line(directory, chunk, offset, limit), directory, chunk, offset)


def read_line(directory: Path, chunk: int, offset: int, limit: int = MAX_RECORD) -> bytes:
    """The line at `offset` of chunk `chunk`, without its newline."""
    if chunk < 0 or offset < 0:
        raise RecordUnreadable(f"no record at chunk {chunk}, offset {offset}: neither may be negative")
    plain = directory / chunk_name(chunk)
    if chunk == 0 and not directory.is_dir():
        plain = directory.with_name(directory.name + ".jsonl")
    try:
        return _plain_line(plain, offset, limit)
    except FileNotFoundError:
        pass
    sealed = plain.with_name(plain.name + ".zst")
    try:
        return _sealed_line(sealed, offset, limit)
    except FileNotFoundError:
        raise RecordUnreadable(f"chunk {chunk} of {directory} is gone: neither {plain.name} nor {sealed.name} exists") from None


def _plain_line(path: Path, offset: int, limit: int) -> bytes:
    try:
        fd, info = open_regular(path)
    except NotReadable as error:
        raise RecordUnreadable(str(error)) from None
    with open(fd, "rb") as file:
        if offset >= info.st_size:
            raise RecordUnreadable(f"offset {offset} is past the end of {path.name} ({info.st_size} bytes)")
        file.seek(offset)
        return _line(file.readline(limit + 1), path, offset, limit, plain=True)


def _sealed_line(path: Path, offset: int, limit: int) -> bytes:
    try:
        fd, _ = open_regular(path)
    except NotReadable as error:
        raise RecordUnreadable(str(error)) from None
    with open(fd, "rb") as raw:
        try:
            with pyzstd.SeekableZstdFile(raw, "rb") as file:
                file.seek(offset)
                if file.tell() < offset:
                    raise RecordUnreadable(f"offset {offset} is past the end of {path.name} ({file.tell()} bytes uncompressed)")
                return _line(file.readline(limit + 1), path, offset, limit, plain=False)
        except (pyzstd.ZstdError, pyzstd.SeekableFormatError, EOFError, OSError) as error:
            raise RecordUnreadable(f"{path.name} cannot be read as seekable zstd ({error})") from None


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
