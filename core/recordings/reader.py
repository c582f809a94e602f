"""Reading a recording: its header, then its records in order; a cut or damaged file
reads up to where it breaks and says where."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgpack

from core.recordings.file_format import FORMAT, MAGIC, VERSION, RecordingError, open_unpacker
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


RECORD_START = re.compile(rb"[\x81-\x8f]\xa1k")
"""How every record begins: a small map whose first key is "k" (its kind). After
damage, reading resumes at the next place that looks like this."""

SEARCH_CHUNK = 1 << 20


class Scan:
    """One pass over a recording's records, from `start`, yielding (offset, length,
    record). A record that cannot be read (a flipped byte, a bad length) is skipped
    and counted, and reading resumes at the next record; a file that ends inside a
    record stops there. `note` says where, after the pass."""

    def __init__(self, path: Path, start: int, read: Reader) -> None:
        self.path = path
        self.start = start
        self.read = read
        self.count = 0
        self.skipped = 0
        self._first_damage: str | None = None
        self._cut: str | None = None

    @property
    def note(self) -> str | None:
        """Where the file was cut, and how many damaged records were skipped."""
        parts = [self._cut] if self._cut else []
        if self.skipped:
            parts.append(f"{self.skipped} damaged record(s) skipped, the first {self._first_damage}")
        return f"{self.path}: " + "; ".join(parts) if parts else None

    def __iter__(self) -> Iterator[tuple[int, int, Any]]:
        with open(self.path, "rb") as file:
            offset: int | None = self.start
            while offset is not None:
                file.seek(offset)
                unpacker = open_unpacker(file)
                base = offset
                while True:
                    try:
                        record = self.read(unpacker)
                    except msgpack.OutOfData:
                        size = file.tell()
                        resume = _next_start(file, offset + 1) if size > offset else None
                        if resume is None:
                            if size > offset:
                                self._cut = (
                                    f"cut at byte {offset} of {size} inside a record "
                                    f"({size - offset} bytes of it); {self.count} records read"
                                )
                            return
                        offset = self._damaged(offset, "a record runs past the next one", resume)
                        break
                    except msgpack.StackError:
                        why = "nested deeper than msgpack reads: a hostile delta, which failed its run live"
                        offset = self._damaged(offset, why, _next_start(file, offset + 1))
                        break
                    except (ValueError, TypeError, msgpack.UnpackException) as error:
                        offset = self._damaged(offset, repr(error), _next_start(file, offset + 1))
                        break
                    end = base + unpacker.tell()
                    if not isinstance(record, dict):
                        offset = self._damaged(offset, f"a {type(record).__name__}, not a record", _next_start(file, offset + 1))
                        break
                    self.count += 1
                    yield offset, end - offset, record
                    offset = end

    def _damaged(self, offset: int, why: str, resume: int | None) -> int | None:
        self.skipped += 1
        if self._first_damage is None:
            self._first_damage = f"at byte {offset} ({why[:80]})"
        return resume


def _next_start(file: BinaryIO, position: int) -> int | None:
    """The offset of the next place a record could start, from `position`."""
    file.seek(position)
    carry = b""
    while chunk := file.read(SEARCH_CHUNK):
        found = RECORD_START.search(carry + chunk)
        if found is not None:
            return position - len(carry) + found.start()
        carry = chunk[-2:]
        position += len(chunk)
    return None


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


