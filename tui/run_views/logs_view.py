"""The tail of a variant's server stdout/stderr capture, read in a worker thread (the
file reads never block the loop), with how much arrived while the tab was hidden.
Long lines wrap to the pane's width (an 80-column terminal still shows each message)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from rich.segment import Segment
from textual import events, on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Select

from tracewatch.core.session.contracts import VariantView
from tracewatch.tui.drawing.literal import safe, wrap
from tracewatch.tui.drawing.numbers import size_text
from tracewatch.tui.drawing.virtual_size import set_virtual_size

TAIL_LINES = 300


class LogLines(ScrollView, can_focus=True):
    """Log lines, each made safe and wrapped to the width (Textual's `Log` cuts them:
    it does not wrap), drawn with the Line API; rewrapped when the width changes, and
    kept at the bottom while the user is there."""

    DEFAULT_CSS = "LogLines { overflow-x: hidden; scrollbar-gutter: stable; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.lines: list[str] = []
        """The lines shown, already safe to draw."""
        self._rows: list[tuple[int, int, int]] = []
        """Each screen row: (line, start, end) of the text it shows."""
        self._width = 0

    def show(self, lines: list[str]) -> None:
        at_end = self.scroll_y >= self.max_scroll_y
        self.lines = [safe(line) for line in lines]
        self._rewrap()
        if at_end:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def _rewrap(self) -> None:
        """Not before the widget has a width (its first resize wraps)."""
        width = self._width = self.scrollable_content_region.width
        self._rows = [(index, start, end) for index, line in enumerate(self.lines) for start, end, _cells in wrap(line, width)] if width > 0 else []
        set_virtual_size(self, Size(width, len(self._rows)))
        self.refresh()

    def on_resize(self, _event: events.Resize) -> None:
        if self.scrollable_content_region.width != self._width:
            at_end = self.scroll_y >= self.max_scroll_y
            self._rewrap()
            if at_end:
                self.scroll_end(animate=False, immediate=True, x_axis=False)

    def render_line(self, y: int) -> Strip:
        row = self.scroll_offset.y + y
        width = self.scrollable_content_region.width
        if not 0 <= row < len(self._rows):
            return Strip.blank(width, self.rich_style)
        index, start, end = self._rows[row]
        return Strip([Segment(self.lines[index][start:end], self.rich_style)]).adjust_cell_length(width, self.rich_style)


class LogsView(Vertical):
    class Unread(Message):
        """The unread count changed: the app relabels the tab."""

    def __init__(self, variants: Mapping[str, VariantView], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.variants = variants
        self.unread = 0
        """Bytes written to every capture since the tab was last visible."""
        self._seen: dict[str, int] = {}
        self._tail_size: int | None = None
        self._visible = False

    def compose(self) -> ComposeResult:
        names = list(self.variants)
        # held, not queried: the reader's answer may land while they are being removed
        self._select: Select[str] = Select(
            [(safe(name), name) for name in names],
            value=names[0] if names else Select.NULL,
            allow_blank=not names,
            prompt="variant",
            compact=True,
            id="log-variant",
        )
        self._log = LogLines(id="log-lines")
        yield self._select
        yield self._log

    def variants_changed(self) -> None:
        """Variants that appeared since (a replay meets them as it plays) join the list;
        the first is shown if none was."""
        select = self._select
        if not select.is_attached:
            return
        shown = self.shown
        names = list(self.variants)
        select.set_options([(safe(name), name) for name in names])
        if names:
            select.value = shown if shown is not None and shown in self.variants else names[0]

    @property
    def shown(self) -> str | None:
        value = self._select.value
        return value if isinstance(value, str) else None

    @on(Select.Changed)
    def _variant_changed(self) -> None:
        self._tail_size = None
        self.poll(self._visible)

    def poll(self, visible: bool) -> None:
        self._visible = visible
        if self._log.is_attached:
            self._read(visible, self.shown)

    @work(thread=True, exclusive=True, group="logs")
    def _read(self, visible: bool, shown: str | None) -> None:
        sizes, tail = {}, None
        for name, variant in self.variants.items():
            try:
                sizes[name] = variant.log_size()
            except OSError:
                sizes[name] = 0
        if visible and shown is not None and sizes.get(shown) != self._tail_size:
            try:
                tail = self.variants[shown].log_tail(TAIL_LINES) or [f"({shown} has written nothing yet)"]
            except OSError as error:
                tail = [f"cannot read the capture of {shown}: {error}"]
        with contextlib.suppress(RuntimeError):  # the app stopped while the files were read
            self.app.call_from_thread(self._apply, sizes, shown, tail, visible)

    def _apply(self, sizes: dict[str, int], shown: str | None, tail: list[str] | None, visible: bool) -> None:
        if visible:
            self._seen = sizes
        unread = sum(max(0, size - self._seen.get(name, 0)) for name, size in sizes.items())
        if unread != self.unread:
            self.unread = unread
            self.post_message(self.Unread())
        log = self._log
        if tail is not None and shown is not None and shown == self.shown and log.is_attached:
            self._tail_size = sizes.get(shown)
            log.show(tail)

    def label(self) -> str:
        return f"Logs ({size_text(self.unread)} new)" if self.unread else "Logs"
