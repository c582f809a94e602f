"""A scrolled view's content size, changed without laying the screen out.

Textual's `virtual_size` is a layout property: each change lays the whole screen out
and repaints every widget, a cost that grows with the rollouts on screen
(docs/performance.md). A view whose own size does not follow its content (fixed or
fractional height and width) only needs its scrollbars told; they lay the screen out
themselves when one appears or goes, which does change the view's region. The table
(a filter keystroke changes its row count), the transcript and the logs (lines added
each tick) size their content here.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.widget import Widget


def set_virtual_size(view: ScrollView, size: Size) -> None:
    if size == view.virtual_size:
        return
    if view.styles.auto_dimensions or not view.container_size:
        view.virtual_size = size  # its own size may follow (or it has none yet): a layout
        return
    view.set_reactive(Widget.virtual_size, size)
    view._scrollbar_changes.clear()  # as a layout does before it updates the scrollbars
    view._scroll_update(size)
    view.refresh()
