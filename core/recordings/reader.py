"""Reading a recording: its header, then its records in order; a cut or damaged file
reads up to where it breaks and says where."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import msgpack

from tracewatch.core.paths import open_regular
from tracewatch.core.recordings.file_format import FORMAT, MAGIC, VERSION, RecordingError, open_unpacker
from tracewatch.core.text import short_repr


class Header(NamedTuple):
    fields: dict[str, Any]
    start: int
    """Where the first record is (or may be, after a damaged header)."""
    cut: str | None = None
    """Why there are no records: the file ends inside its header."""
    damage: str | None = None
    """Why the header could not be read although the file is a recording."""


def read_header(path: Path) -> Header:
    """The header and where its records start. A file cut inside its header has no
    records; one whose header is damaged (a flipped byte) but that starts as ours
    is read from its first record, since every record stands on its own."""
    try:
        file = open_regular(path, "a recording")
    except OSError as error:
        raise RecordingError(str(error) if error.errno is None else f"cannot open recording {path}: {error.strerror}") from None
    with file:
        unpacker = open_unpacker(file)
        try:
            header = unpacker.unpack()
        except msgpack.OutOfData:
            file.seek(0)
            head = file.read(1 + len(MAGIC))
            if head and not (0x80 <= head[0] <= 0x8F and MAGIC.startswith(head[1:])):
                raise RecordingError(f"{path} is not a tracewatch recording (it is not msgpack)") from None
            if _next_start(file, 1) is not None:  # records follow: a length in the header grew
                return _damaged_header(path, file, "it runs on to the end of the file")
            size = os.fstat(file.fileno()).st_size
            where = "is empty" if size == 0 else f"is cut inside its header at byte {size}"
            return Header({}, size, cut=f"{path} {where}: no records")
        except (ValueError, TypeError, msgpack.UnpackException) as error:
            return _damaged_header(path, file, f"it does not decode: {error}")
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            return _damaged_header(
                path, file, f"it starts with {type(header).__name__} {short_repr(header)}, not a header with format {FORMAT!r}"
            )
        version = header.get("version")
        if isinstance(version, int) and version > VERSION:
            raise RecordingError(
                f"{path} is a tracewatch recording of format version {version!r}; this "
                f"tracewatch reads version {VERSION}: open it with the tracewatch that wrote it"
            )
        if not isinstance(version, int) or version < 1:
            return _damaged_header(path, file, f"it has format version {short_repr(version)}, which no tracewatch writes")
        start = unpacker.tell()
        file.seek(start)
        after = file.read(3)
        if after and RECORD_START.match(after) is None and len(after) == 3:
            # a length inside the header changed: it ends before or inside the first record
            return _damaged_header(path, file, f"it does not end where a record starts (byte {start})")
        return Header(header, start)


def _damaged_header(path: Path, file: BinaryIO, why: str) -> Header:
    """A header that does not read, in a file that starts as a recording does (at most
    one byte of its first ones differs) and has a record after it: reported, and read
    from that record. Anything else is not ours."""
    file.seek(0)
    head = file.read(1 + len(MAGIC))
    differing = sum(a != b for a, b in zip(head[1:], MAGIC)) + (not 0x80 <= head[0] <= 0x8F if head else 1)
    first = _next_start(file, 1) if len(head) == 1 + len(MAGIC) and differing <= 1 else None
    if first is None:
        raise RecordingError(f"{path} is not a tracewatch recording: {why}")
    return Header({}, first, damage=f"the header is damaged ({why}); records read from byte {first}")


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

    def __init__(self, path: Path, start: int, read: Reader, header_damage: str | None = None) -> None:
        self.path = path
        self.start = start
        self.read = read
        self.header_damage = header_damage
        self.count = 0
        self.skipped = 0
        self._first_damage: str | None = None
        self._cut: str | None = None

    @property
    def note(self) -> str | None:
        """Where the file was cut, and how many damaged records were skipped."""
        parts = [part for part in (self.header_damage, self._cut) if part]
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

    def __init__(self, path: Path, header: Header) -> None:
        self.path = path
        self.header = header.fields
        self.truncated = header.cut or (f"{path}: {header.damage}" if header.damage else None)
        self.records_read = 0
        self._read_from = header

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._read_from.cut:
            return
        scan = Scan(self.path, self._read_from.start, msgpack.Unpacker.unpack, self._read_from.damage)
        for _offset, _length, record in scan:
            self.records_read = scan.count
            yield record
        self.records_read = scan.count
        self.truncated = scan.note


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """Open a recording; raises `RecordingError` for a file of another format or a
    newer version."""
    path = Path(path)
    return Recording(path, read_header(path))


class Span(NamedTuple):
    """How many records a recording holds and the times they span (None without any)."""

    records: int
    first_t: float | None
    last_t: float | None


def _read_time(unpacker: msgpack.Unpacker) -> dict[str, Any]:
    """A record with only its time decoded; the rest is skipped undecoded."""
    record = {}
    for _ in range(unpacker.read_map_header()):
        if unpacker.unpack() == "t":
            record["t"] = unpacker.unpack()
        else:
            unpacker.skip()
    return record


def recording_span(path: str | os.PathLike[str]) -> Span:
    """Its records counted and their times' range, in a pass that decodes nothing
    else: what a replay's position needs of the whole file."""
    header = read_header(Path(path))
    if header.cut:
        return Span(0, None, None)
    scan = Scan(Path(path), header.start, _read_time, header.damage)
    first = last = None
    for _, _, record in scan:
        t = record.get("t")
        if type(t) in (int, float):
            first = t if first is None else min(first, t)
            last = t if last is None else max(last, t)
    return Span(scan.count, first, last)

