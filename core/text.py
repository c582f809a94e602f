"""Short, safe descriptions of values that came from outside, for error messages."""

from __future__ import annotations

from typing import Any


def short_repr(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters (ending in "..."), so one huge or
    hostile value cannot flood a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
