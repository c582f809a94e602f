"""Small formatting shared by the widgets: durations, rewards, sizes, and phase styles
read from CSS component classes (Rich cells cannot read `$primary` themselves)."""

from __future__ import annotations

from pathlib import Path

from rich.style import Style
from textual.widget import Widget

from core.session.store import ROLLOUT_PHASES
from core.wire.protocol import AGENT_PARTS
from tui.text import safe

__all__ = ["clock", "reward_text", "size_text", "Palette", "safe"]

PHASE_NAMES = (*ROLLOUT_PHASES, *AGENT_PARTS, "stalled")
"""Everything drawn in a phase's colour: the phases, the agent's two parts, and how a
rollout stands."""
TONES = ("muted", "warning", "error", "success", "primary")
PALETTE_CLASSES = {f"phase--{name}" for name in PHASE_NAMES} | {f"tone--{name}" for name in TONES}
"""The component classes a `Palette` is read from; their looks are CSS, in app.tcss.
The rollouts table declares them and the app shares its palette with the other views."""


def clock(seconds: float | None) -> str:
    """`0:41`, `12:03`, `1:02:03`: what a glance at a running rollout needs."""
    if seconds is None:
        return ""
    total = int(max(0.0, seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02}:{secs:02}" if hours else f"{minutes}:{secs:02}"


def home_short(path: Path) -> str:
    """A path with the home folder as `~`: shorter in a toast or a status line."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


def reward_text(reward: float | None) -> str:
    return "" if reward is None else f"{reward:.2f}"


def size_text(size: float) -> str:
    for unit in ("B", "kB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


class Palette:
    """Rich styles per phase and tone, read from a widget's component classes (so the
    theme and app.tcss decide the colours); rebuilt on theme change."""

    def __init__(self, widget: Widget) -> None:
        def look(name: str) -> Style:
            return widget.get_component_rich_style(name, partial=True)

        self.styles = {phase: look(f"phase--{phase}") for phase in PHASE_NAMES}
        self.muted, self.warning, self.error, self.success, self.primary = (look(f"tone--{tone}") for tone in TONES)

    def phase(self, phase: str) -> Style:
        return self.styles.get(phase, Style())
