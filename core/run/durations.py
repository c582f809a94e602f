"""How long something took, as every view and command writes it.

One rule everywhere: a duration is cut to the places shown, never rounded up. A clock
ticks that way (a rollout 24.7 s in reads 0:24 until its 25th second has passed), and
cutting agrees with itself at every precision: the table's 0:24, Compare's 24s and the
timing's 24.7s are one number, where rounding made the same rollout 0:24 in the table
and 25s in Compare.
"""

from __future__ import annotations

import math


def cut(seconds: float, places: int = 0) -> float:
    """`seconds` cut to `places` decimals (a hair of float error below the next step
    counts as reaching it: 24.7 is not 24.6999...)."""
    scale = 10.0**places
    scaled = seconds * scale
    if not math.isfinite(scaled):  # NaN, infinite, or a source's 1e308 past float's range once scaled
        return seconds
    return math.floor(round(scaled, 6)) / scale


def clock(seconds: float | None) -> str:
    """`0:41`, `12:03`, `1:02:03`: what a glance at a running rollout needs."""
    if seconds is None:
        return ""
    total = int(cut(max(0.0, seconds))) if math.isfinite(seconds) else 0
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02}:{secs:02}" if hours else f"{minutes}:{secs:02}"


def seconds_text(seconds: float, places: int = 1) -> str:
    """`24.7s` (`24s` with no places)."""
    return f"{cut(seconds, places):.{places}f}s"


def span_text(seconds: float) -> str:
    """A phase's time: `640ms` under a second, `24.7s` from there. A time under a
    millisecond reads `<1ms`: cut to `0ms` it read as a phase that took no time, which
    only a true zero does."""
    if seconds >= 1:
        return seconds_text(seconds)
    milliseconds = cut(seconds * 1000)
    return "<1ms" if milliseconds == 0 < seconds else f"{milliseconds:.0f}ms"
