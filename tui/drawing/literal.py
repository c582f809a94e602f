"""Trace text is data: it is drawn literally, never interpreted.

Strings from a trace never go through Rich or Textual markup, and no terminal control
character reaches the terminal: each is shown visibly instead. C0 controls (ESC, BEL,
backspace, carriage return, ...) become their Unicode control pictures ("\\x1b" shows as
"␛"), DEL shows as "␡"; C1 controls, bidi controls, zero-width and other invisible
format characters, line separators and lone surrogates, which have no picture, show as
a literal escape ("\\x9b", "\\u202e", "\\u200b"), as `tracewatch.core.text` spells them. Tabs are
expanded.

The common case (plain text) costs one regex search; only text that holds something
to escape pays for `str.translate`.
"""

from __future__ import annotations

from rich.cells import cell_len, set_cell_size, split_graphemes

from tracewatch.core.text import ESCAPES, UNSAFE_BUT_NEWLINE, visible

TAB_SIZE = 4


def safe(text: str) -> str:
    """`text` as one line that shows every character literally: tabs expanded, every
    control (newline included) replaced by a visible stand-in."""
    if "\t" in text:
        text = text.expandtabs(TAB_SIZE)
    return visible(text)


def safe_lines(text: str) -> list[str]:
    """`text` split on newlines, each line made `safe`."""
    if "\t" in text:
        text = text.expandtabs(TAB_SIZE)
    lines = text.split("\n")
    if UNSAFE_BUT_NEWLINE.search(text) is None:
        return lines
    return [line.translate(ESCAPES) for line in lines]


def wrap(text: str, width: int) -> list[tuple[int, int, int]]:
    """Where to break a safe line to fit `width` cells: (start, end, cells) ranges,
    breaking after a space when one falls in the last two thirds of the line, else
    mid-word. Single-cell text takes a fast path; wide and combined characters are
    measured by grapheme."""
    width = max(1, width)
    if text.isascii():
        size = len(text)
        if size <= width:
            return [(0, size, size)]
        ranges = []
        start = 0
        while size - start > width:
            cut = text.rfind(" ", start + width // 3, start + width + 1)
            if cut < 0:
                end = after = start + width
            else:
                end, after = min(cut + 1, start + width), cut + 1
            ranges.append((start, end, end - start))
            start = after
        ranges.append((start, size, size - start))
        return ranges
    total = cell_len(text)
    if total <= width:
        return [(0, len(text), total)]
    spans, _ = split_graphemes(text)
    ranges = []
    start = cells = 0
    space = None
    for begin, end, size in spans:
        if cells + size > width:
            if space is not None and space[1] >= width // 3:
                cut, cut_cells = space
                ranges.append((start, cut, cut_cells))
                start, cells = cut, cells - cut_cells
            if cells + size > width and cells:
                ranges.append((start, begin, cells))
                start, cells = begin, 0
            space = None
        cells += size
        if text[begin] == " ":
            space = (end, cells)
    ranges.append((start, len(text), cells))
    return ranges


def fit(text: str, width: int) -> str:
    """`text` in exactly `width` cells: padded, or cut with "…" so a cut name reads as
    cut (a label cut bare, "candidat", reads as another word)."""
    size = len(text) if text.isascii() else cell_len(text)
    if size <= width:
        return text + " " * (width - size)
    return set_cell_size(text, width - 1) + "…" if width > 0 else ""
