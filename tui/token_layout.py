"""A message's tokens as lines of a given width: each token's text made visible (a
space as `·`, a newline as `↵` then a break, a tab as `→`, every control as
`tui.literal` shows it), special tokens kept whole, wrapped mid-token only when a token
is wider than what is left of its line. One pass over the tokens, so a 32k-token
message lays out in tens of milliseconds; drawing then reads one line at a time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len

from core.tokens.tokenizer import Piece
from tui.literal import safe

_VISIBLE = str.maketrans({" ": "·", "\t": "→"})
EMPTY = "⌀"
"""A token whose text is empty on its own (a byte of a character split across tokens
may decode to nothing)."""

Fragment = tuple[int, str]
"""A token's index and the part of its text on this line."""


def visible(piece: Piece) -> list[tuple[str, bool]]:
    """The token's text as shown, in parts, each with whether the line breaks after
    it (after a newline)."""
    if piece.special:
        return [(safe(piece.text), False)]
    text = piece.text.translate(_VISIBLE)
    if not text:
        return [(EMPTY, False)]
    parts = text.split("\n")
    shown = [(safe(part) + "↵", True) for part in parts[:-1]]
    if parts[-1]:
        shown.append((safe(parts[-1]), False))
    return shown


def id_piece(token_id: int) -> Piece:
    """What a token shows without a tokenizer: its id."""
    return Piece(f"⟨{token_id}⟩", False)


@dataclass
class Layout:
    lines: list[list[Fragment]]
    first_line: list[int]
    """Each token's first line."""
    width: int


def lay_out(pieces: Sequence[Piece], width: int) -> Layout:
    width = max(4, width)
    lines: list[list[Fragment]] = [[]]
    first_line: list[int] = []
    used = 0
    for index, piece in enumerate(pieces):
        first_line.append(-1)
        for part, breaks in visible(piece):
            size = _cells(part)
            if used and used + size > width and size <= width:
                lines.append([])
                used = 0
            while size > width - used:
                cut = _cut(part, width - used)
                if cut:
                    if first_line[-1] < 0:
                        first_line[-1] = len(lines) - 1
                    lines[-1].append((index, part[:cut]))
                part = part[cut:]
                size = _cells(part)
                lines.append([])
                used = 0
            if part:
                if first_line[-1] < 0:
                    first_line[-1] = len(lines) - 1
                lines[-1].append((index, part))
                used += size
            if breaks:
                lines.append([])
                used = 0
    if not lines[-1] and len(lines) > 1:
        lines.pop()
    return Layout(lines, first_line, width)


def _cells(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def _cut(text: str, cells: int) -> int:
    """How many characters of `text` fit in `cells`."""
    if text.isascii():
        return max(0, cells)
    taken = 0
    for count, char in enumerate(text):
        taken += cell_len(char)
        if taken > cells:
            return count
    return len(text)
