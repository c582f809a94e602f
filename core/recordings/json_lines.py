"""JSON lines read one at a time with a bound on each, for the files other programs
write (a verifiers run's `traces.jsonl`, prime-rl's rollouts): a file of any size is
read holding one line, a line of any length holds at most `MAX_LINE_BYTES`, and a line
that is not JSON, or nests deeper than the parser goes, is one line said, never an
exception."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

MAX_LINE_BYTES = 256 << 20
"""One line is one episode; a real one with every token array of a long agent run is
tens of MB. A longer line is skipped (read past in `_SKIP_CHUNK` pieces), not held."""
_SKIP_CHUNK = 1 << 20


def json_lines(file: IO[bytes]) -> Iterator[tuple[int, Any, str | None]]:
    """Each non-blank line's number and value, or (number, None, what is wrong with it):
    longer than `MAX_LINE_BYTES`, cut short (the last line, with no newline: its writer
    was stopped mid-line), not JSON, or nested deeper than JSON is read."""
    limit = MAX_LINE_BYTES
    number = 0
    while line := file.readline(limit + 1):
        number += 1
        if len(line) > limit and not line.endswith(b"\n"):
            _skip_rest(file)
            yield number, None, f"longer than {limit / (1 << 20):g} MiB: not read"
            continue
        if not line.strip():
            continue
        try:
            yield number, json.loads(line), None
        except RecursionError:
            yield number, None, "nested deeper than JSON is read here"
        except ValueError as error:
            yield number, None, "cut short (the run was stopped while writing it)" if not line.endswith(b"\n") else f"not JSON ({error})"


def _skip_rest(file: IO[bytes]) -> None:
    while (chunk := file.readline(_SKIP_CHUNK)) and not chunk.endswith(b"\n"):
        pass
