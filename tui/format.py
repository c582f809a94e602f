"""Small formatting shared by the widgets: durations, rewards, sizes, and phase styles
resolved from the current Textual theme (Rich cells cannot read `$primary` themselves)."""

from __future__ import annotations

from rich.style import Style
from textual.app import App
from textual.color import Color, ColorParseError

from tui.text import safe

__all__ = ["clock", "reward_text", "size_text", "Palette", "safe"]

# Phase -> (theme variable or ANSI colour when no theme variable exists, bold, dim).
# Model and harness are the agent's two parts, so they share its colour (the waterfall
# tells them apart by glyph); boot and finalize are housekeeping, in neutral tones, so
# that nothing but an error is drawn in a red.
_PHASE_LOOK: dict[str, tuple[str | None, bool, bool]] = {
    "queued": (None, False, True),
    "starting": (None, False, True),
    "boot": (None, False, True),
    "setup": ("warning", False, False),
    "agent": ("primary", False, False),
    "model": ("primary", False, False),
    "harness": ("primary", False, False),
    "finalize": ("foreground", False, False),
    "scoring": ("success", False, False),
    "done": ("success", True, False),
    "error": ("error", True, False),
    "failed": ("error", True, False),
    "cancelling": ("warning", False, False),
    "cancelled": ("warning", False, True),
    "stalled": ("warning", True, False),
}


def clock(seconds: float | None) -> str:
    """`0:41`, `12:03`, `1:02:03`: what a glance at a running rollout needs."""
    if seconds is None:
        return ""
    total = int(max(0.0, seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02}:{secs:02}" if hours else f"{minutes}:{secs:02}"


def reward_text(reward: float | None) -> str:
    return "" if reward is None else f"{reward:.2f}"


def size_text(size: float) -> str:
    for unit in ("B", "kB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


class Palette:
    """Rich styles per phase, from the theme's variables; rebuilt on theme change."""

    def __init__(self, app: App) -> None:
        variables = app.get_css_variables()
        self.styles: dict[str, Style] = {}
        for phase, (colour, bold, dim) in _PHASE_LOOK.items():
            self.styles[phase] = Style(color=_rich_colour(variables, colour), bold=bold, dim=dim)
        self.muted = Style(dim=True)
        self.warning = Style(color=_rich_colour(variables, "warning"), bold=True)
        self.error = Style(color=_rich_colour(variables, "error"))
        self.success = Style(color=_rich_colour(variables, "success"))
        self.primary = Style(color=_rich_colour(variables, "primary"))

    def phase(self, phase: str) -> Style:
        return self.styles.get(phase, Style())


def _rich_colour(variables: dict[str, str], name: str | None) -> str | None:
    if name is None:
        return None
    value = variables.get(name)
    if value is None:
        return name
    try:
        return Color.parse(value).rich_color.name
    except ColorParseError:
        return None
