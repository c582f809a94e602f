"""The rollouts filter's text field.

Textual's `Input` gives itself a new virtual size at each keystroke (its text's width
plus the cursor), and a virtual size is a layout property: every keystroke in the
filter would lay the whole screen out. A field
of fixed width scrolls its text within itself, so here the size is set without one.

Its text goes to `changed` as it changes, in the same step as the key, not in an
`Input.Changed` message: that message bubbles up one widget at a time, each hop waiting
for the loop to come round to the next widget's queue (behind the ingest's batches
and the tick), so it reaches the app late while rollouts stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict, Unpack

from textual.geometry import Size
from textual.widget import Widget
from textual.widgets import Input


class InputOptions(TypedDict, total=False):
    """What the app passes on to Textual's `Input`."""

    placeholder: str
    compact: bool
    select_on_focus: bool
    id: str


class FilterField(Input):
    def __init__(self, changed: Callable[[str], None], **options: Unpack[InputOptions]) -> None:
        super().__init__(**options)
        self._changed = changed

    def _watch_value(self, value: str) -> None:
        if not self.styles.auto_dimensions:
            self.set_reactive(Widget.virtual_size, Size(self.content_width, 1))  # Input sets the same: no layout
        super()._watch_value(value)
        self._changed(value)
