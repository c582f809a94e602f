"""Phase and tone styles read from CSS component classes (Rich cells cannot read
`$primary` themselves), so the theme and app.tcss decide every colour a widget draws."""

from __future__ import annotations

from rich.style import Style
from textual.widget import Widget

from tracewatch.core.session.phases import ROLLOUT_PHASES
from tracewatch.core.wire.protocol import AGENT_PARTS

PHASE_NAMES = (*ROLLOUT_PHASES, *AGENT_PARTS, "stalled")
"""Everything drawn in a phase's colour: the phases, the agent's two parts, and how a
rollout stands."""
TONES = ("muted", "warning", "error", "success", "primary")
PALETTE_CLASSES = {f"phase--{name}" for name in PHASE_NAMES} | {f"tone--{name}" for name in TONES}
"""The component classes a `Palette` is read from; their looks are CSS, in app.tcss.
The rollouts table declares them and the app shares its palette with the other views."""


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
