"""The rollouts filter's text field.

Textual's `Input` gives itself a new virtual size at each keystroke (its text's width
plus the cursor), and a virtual size is a layout property: every keystroke in the
filter laid the whole screen out (40-60 ms on a loaded box, bench/scale5k.py). A field
of fixed width scrolls its text within itself, so here the size is set without one.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.widget import Widget
from textual.widgets import Input


class FilterField(Input):
    def _watch_value(self, value: str) -> None:
        if not self.styles.auto_dimensions:
            self.set_reactive(Widget.virtual_size, Size(self.content_width, 1))  # Input sets the same: no layout
        super()._watch_value(value)
