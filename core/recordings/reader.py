"""Reading a recording: its header, then its records in order; a cut or damaged file
reads up to where it breaks and says where."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack

from core.recordings.format import FORMAT, MAGIC, VERSION, RecordingError, open_unpacker
from core.text import short_repr


def read_header(path: Path) -> tuple[dict[str, Any], int, str | None]:
    """The header, the offset of the first record, and a note if the file ends
    inside the header."""
    try:
        file = open(path, "rb")
    except OSError as error:
        raise RecordingError(f"cannot open recording {path}: {error.strerror or error}") from None
    with file:
        unpacker = open_unpacker(file)
        try:
            header = unpacker.unpack()
        except msgpack.OutOfData:
            file.seek(0)
            head = file.read(1 + len(MAGIC))
            if head and not (0x80 <= head[0] <= 0x8F and MAGIC.startswith(head[1:])):
                raise RecordingError(f"{path} is not a tracewatch recording (it is not msgpack)") from None
            size = os.fstat(file.fileno()).st_size
            where = "is empty" if size == 0 else f"is cut inside its header at byte {size}"
            return {}, size, f"{path} {where}: no records"
        except (ValueError, TypeError, msgpack.UnpackException) as error:
            raise RecordingError(f"{path} is not a tracewatch recording ({error})") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise RecordingError(
                f"{path} is not a tracewatch recording: it starts with {type(header).__name__} {short_repr(header)}, "
                f"not a header with format {FORMAT!r}"
            )
        version = header.get("version")
        if not isinstance(version, int) or not 1 <= version <= VERSION:
            raise RecordingError(
                f"{path} is a tracewatch recording of format version {version!r}; this "
                f"tracewatch reads version {VERSION}: open it with the tracewatch that wrote it"
            )
        return header, unpacker.tell(), None


Reader = Callable[[msgpack.Unpacker], Any]


class Scan:
    """One pass over a recording's records, from `start`, yielding (offset, length,
    record). On a cut or unreadable record it stops and leaves `note` saying where."""

    def __init__(self, path: Path, start: int, read: Reader) -> None:
        self.path = path
        self.start = start
        self.read = read
        self.count = 0
        self.note: str | None = None

    def __iter__(self) -> Iterator[tuple[int, int, Any]]:
        with open(self.path, "rb") as file:
            file.seek(self.start)
            unpacker = open_unpacker(file)
            offset = self.start
            while True:
                try:
                    record = self.read(unpacker)
                except msgpack.OutOfData:
                    size = file.tell()
                    if size > offset:
                        self.note = (
                            f"{self.path}: cut at byte {offset} of {size} inside a record "
                            f"({size - offset} bytes of it); {self.count} records read"
                        )
                    return
                except (ValueError, TypeError, msgpack.UnpackException) as error:
                    self.note = (
                        f"{self.path}: unreadable data at byte {offset} ({error}); "
                        f"{self.count} records read before it"
                    )
                    return
                end = self.start + unpacker.tell()
                if not isinstance(record, dict):
                    self.note = (
                        f"{self.path}: unreadable data at byte {offset} (a {type(record).__name__}, "
                        f"not a record); {self.count} records read before it"
                    )
                    return
                self.count += 1
                yield offset, end - offset, record
                offset = end


class Recording:
    """A recording opened for reading: `header`, then its records in order by
    iterating (each pass reads the file afresh, so a recording still being written
    shows what has landed). After a pass, `truncated` says where a cut or damaged
    file stopped, or is None."""

    def __init__(self, path: Path, header: dict[str, Any], start: int, truncated: str | None) -> None:
        self.path = path
        self.header = header
        self.truncated = truncated
        self.records_read = 0
        self._start = start
        self._header_cut = truncated is not None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._header_cut:
            return
        scan = Scan(self.path, self._start, msgpack.Unpacker.unpack)
        for _offset, _length, record in scan:
            self.records_read = scan.count
            yield record
        self.records_read = scan.count
        self.truncated = scan.note


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """Open a recording; raises `RecordingError` for a file of another format or a
    newer version."""
    path = Path(path)
    header, start, note = read_header(path)
    return Recording(path, header, start, note)


