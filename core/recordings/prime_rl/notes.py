"""What a reader could not read, in words, without letting hostile input flood memory."""

from __future__ import annotations

from tracewatch.core.text import visible

KEPT = 20


class Notes:
    """Every problem counted; the first `KEPT` kept as text a screen can show literally."""

    __slots__ = ("count", "first")

    def __init__(self) -> None:
        self.count = 0
        self.first: list[str] = []

    def add(self, text: str) -> None:
        self.count += 1
        if len(self.first) < KEPT:
            self.first.append(visible(text))

    def __bool__(self) -> bool:
        return self.count > 0

    def __repr__(self) -> str:
        return f"Notes({self.count}: {self.first[:3]})"
