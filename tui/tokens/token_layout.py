"""A message's tokens as lines of a given width: each token's text made visible (a
space as `·`, a newline as `↵` then a break, a tab as `→`, every control as
`tracewatch.tui.drawing.literal` shows it), special tokens kept whole, wrapped mid-token only when a token
is wider than what is left of its line. One pass over the tokens, so a 32k-token
message lays out in tens of milliseconds; drawing then reads one line at a time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from rich.cells import cell_len

from tracewatch.core.tokens.tokenizer import Piece
from tracewatch.tui.drawing.literal import safe

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


CHUNK = 4096
"""Tokens laid out at a time past what is on screen."""


class Layout:
    """The lines of a message at one width, laid out as far as they are asked for: the
    first screens when the view opens, the rest a chunk at a time after (or at once for
    a jump to the end), so opening a 32k-token message costs what a short one does.

    Each line is two parallel lists, its tokens and their text on it: a few lists per
    line rather than a tuple per token, little for the garbage collector to walk."""

    def __init__(self, pieces: Sequence[Piece], width: int) -> None:
        self.pieces = pieces
        self.width = max(4, width)
        self.tokens: list[list[int]] = [[]]
        self.texts: list[list[str]] = [[]]
        self.first_line: list[int] = []
        """Each laid-out token's first line."""
        self._used = 0
        self._shapes: dict[int, list[tuple[str, int, bool]]] = {}
        """Each distinct piece's parts with their cells, worked out once (a message
        repeats a few thousand distinct tokens at most); keyed by the object, which a
        tokenizer's cache hands out once per id and `pieces` keeps alive."""

    @property
    def done(self) -> bool:
        return len(self.first_line) == len(self.pieces)

    def __len__(self) -> int:
        """Lines laid out (the last may still grow until `done`)."""
        count = len(self.tokens)
        return count - 1 if self.done and count > 1 and not self.tokens[-1] else count

    def fragments(self, line: int) -> Iterator[Fragment]:
        return zip(self.tokens[line], self.texts[line])

    def text(self, line: int) -> str:
        return "".join(self.texts[line])

    def reach_line(self, line: int) -> None:
        """Lay out until `line` is complete."""
        while not self.done and len(self.tokens) <= line + 1:
            self.extend(CHUNK)

    def reach_token(self, token: int) -> None:
        while not self.done and len(self.first_line) <= token:
            self.extend(CHUNK)

    def finish(self) -> None:
        self.extend(len(self.pieces))

    def extend(self, count: int) -> None:
        """Lay out the next `count` tokens."""
        tokens, texts, first_line, shapes, width = self.tokens, self.texts, self.first_line, self._shapes, self.width
        used = self._used
        start = len(first_line)
        for index in range(start, min(len(self.pieces), start + count)):
            piece = self.pieces[index]
            shape = shapes.get(id(piece))
            if shape is None:
                shape = shapes[id(piece)] = [(part, _cells(part), breaks) for part, breaks in visible(piece)]
            if len(shape) == 1 and used + shape[0][1] <= width:
                part, size, breaks = shape[0]
                first_line.append(len(tokens) - 1)
                tokens[-1].append(index)
                texts[-1].append(part)
                used += size
                if breaks:
                    tokens.append([])
                    texts.append([])
                    used = 0
                continue
            first_line.append(-1)
            for part, size, breaks in shape:
                if used and used + size > width and size <= width:
                    tokens.append([])
                    texts.append([])
                    used = 0
                while size > width - used:
                    cut = _cut(part, width - used)
                    if cut:
                        self._put(index, part[:cut])
                    part = part[cut:]
                    size = _cells(part)
                    tokens.append([])
                    texts.append([])
                    used = 0
                if part:
                    self._put(index, part)
                    used += size
                if breaks:
                    tokens.append([])
                    texts.append([])
                    used = 0
        self._used = used

    def _put(self, index: int, part: str) -> None:
        if self.first_line[-1] < 0:
            self.first_line[-1] = len(self.tokens) - 1
        self.tokens[-1].append(index)
        self.texts[-1].append(part)


def lay_out(pieces: Sequence[Piece], width: int) -> Layout:
    """All of a message's lines at `width`."""
    layout = Layout(pieces, width)
    layout.finish()
    return layout


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
