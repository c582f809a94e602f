"""Text that came from outside, made safe to print: short descriptions for error
messages, and every character that would control a terminal or disguise the text
around it shown as a visible stand-in (trace text on screen, names and reasons in
headless output alike)."""

from __future__ import annotations

import re
from typing import Any, TextIO


def short_repr(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters (ending in "..."), so one huge or
    hostile value cannot flood a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_ESCAPED = (
    [*range(0x00, 0x20), *range(0x7F, 0xA0), 0x00AD, 0x061C, 0x180E, *range(0x200B, 0x2010)]
    + [0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2060, 0x2065), *range(0x2066, 0x2070)]
    + [0xFEFF, *range(0xFFF9, 0xFFFC), *range(0xD800, 0xE000)]
)
"""Code points that control a terminal or change how the text around them is shown:
bidi marks, embeddings, overrides and isolates can make a command read as something
else, and zero-width characters (ZWSP, ZWJ, word joiner, BOM, soft hyphen, invisible
operators) hide text or make two different strings look the same; surrogates cannot be
encoded for the terminal at all."""


def _picture(code: int) -> str:
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


ESCAPES = {code: _picture(code) for code in _ESCAPED}
UNSAFE = re.compile("[" + "".join(re.escape(chr(code)) for code in _ESCAPED) + "]")
UNSAFE_BUT_NEWLINE = re.compile(
    "[" + "".join(re.escape(chr(code)) for code in _ESCAPED if code != 0x0A) + "]"
)


def visible(text: str) -> str:
    """`text` with every character in `ESCAPES` (newline and tab included) replaced by
    its stand-in; plain text costs one regex search."""
    if UNSAFE.search(text) is None:
        return text
    return text.translate(ESCAPES)


def say(out: TextIO, line: str) -> None:
    """Print one line a command says: names, task labels, keys, paths and reasons come
    from configs, servers, recordings and run folders, so each control or direction
    character shows as its escape (an OSC 52 in a folder's name never reaches the
    terminal as one), as in trace text."""
    print(visible(line), file=out, flush=True)
