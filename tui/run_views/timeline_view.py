"""The Timeline tab: every rollout a bar on one wall-clock axis, a row each, grouped by
variant, coloured by where its time went (waiting for a slot, an attempt discarded and
retried, boot, setup, model, harness, finalize, scoring), failed and cancelled ends marked; above them each
variant's rollouts running and waiting over the same axis. Drawn from the store's
summaries (`Rollout.times`, the run's series), only the rows on screen, so a run of
5,000 rollouts costs what the screen shows."""

from __future__ import annotations

import math
from typing import Self

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tracewatch.core.run.durations import clock
from tracewatch.core.run.series import Column
from tracewatch.core.run.times import SEGMENTS, bar_segments
from tracewatch.core.session.contracts import StoreView
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.status import Status
from tracewatch.tui.chrome.keys import bindings
from tracewatch.tui.drawing.literal import fit, safe
from tracewatch.tui.drawing.palette import Palette
from tracewatch.tui.drawing.virtual_size import set_virtual_size

LABEL_WIDTH = 20
"""The label column: a variant's name with its running or waiting count ("candidate
wait 12"), a rollout's key; what does not fit is cut with "…", never bare."""
GLYPHS = {"waiting": "░", "attempt": "▚", "harness": "▒"}
"""A segment's cell; the others are full blocks in their phase's colour (model and
harness share the agent's colour, as the waterfall draws them, told apart by glyph; a
discarded attempt is drawn in the error colour)."""
ENDS = {Status.FAILED: "✗", Status.CANCELLED: "⊘"}
LEGEND = {"waiting": "wait", "attempt": "retried", "finalize": "final"}
"""Shorter names where the legend must fit a narrow pane."""
LEVELS = " ▁▂▃▄▅▆▇█"
ZOOM = 2.0
PAN = 0.25
"""A pan moves the window by this share of its width."""
MIN_SECONDS = 0.5
"""The narrowest window a zoom reaches."""
TWO_LINE_HEIGHT = 14
"""From this height each variant's concurrency takes two lines (running, waiting);
below it, one (running)."""


class TimelineView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    TimelineView {
        background: $surface;
        color: $foreground;
        & > .timeline--cursor { background: $block-cursor-background; color: $block-cursor-foreground; text-style: bold; }
        &:blur > .timeline--cursor { background: $block-cursor-blurred-background; color: $block-cursor-blurred-foreground; }
        & > .timeline--group { text-style: bold; }
    }
    """
    COMPONENT_CLASSES = {"timeline--cursor", "timeline--group"}
    BINDINGS = bindings("timeline")

    class Highlighted(Message):
        """The user moved the timeline's cursor onto this rollout."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    class Chosen(Message):
        """Enter, or a click on the rollout under the cursor."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, store: StoreView, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self.palette: Palette | None = None
        self.window: tuple[float, float] | None = None
        """The stretch of time shown; None: the whole run, growing as it goes."""
        self._rows: list[str] = []
        """Rollout keys, and a variant's name before its rollouts (`_groups`)."""
        self._groups: set[int] = set()
        self._row_of: dict[str, int] = {}
        self._built_for = -1
        self._cursor = 0
        self._span = (0.0, 1.0)
        self._styles: dict[str, Style] = {}
        self._columns: dict[str, list[Column]] = {}
        self._columns_for: tuple[object, ...] = ()
        """Each variant's concurrency columns, kept while the window, the width and the
        run's buckets stay as they were."""
        self.rows_drawn = 0
        """Rollout bars drawn (a frame draws the rows on screen, not the run)."""

    # -- what the app calls --------------------------------------------------------

    def sync(self) -> None:
        """Rows for rollouts added since the last look, then a repaint."""
        if len(self.store.rollouts) != self._built_for:
            self._build()
        self.refresh()

    def select(self, key: str | None) -> None:
        """The app's selection (the table's cursor) shown here, without a message back."""
        if key is not None and key != self.cursor_key:
            self.sync()
            if (row := self._row_of.get(key)) is not None:
                self._cursor = row
                self._scroll_to_cursor()
                self.refresh()

    @property
    def cursor_key(self) -> str | None:
        if 0 <= self._cursor < len(self._rows) and self._cursor not in self._groups:
            return self._rows[self._cursor]
        return None

    def span(self) -> tuple[float, float]:
        """The window shown: the whole run (to now while anything runs) until a zoom or
        pan fixes one; worked out when the view is told to repaint, not per line."""
        if self.window is not None:
            return self.window
        series, now = self.store.series, self.store.clock()
        if series.first is None:
            return now - 60.0, now
        end = max(series.last or now, now if self.store.running_count() else 0.0)
        return series.first, max(end, series.first + MIN_SECONDS)

    def refresh(self, *regions: Region, **kwargs: bool) -> Self:
        self._span = self.span()
        drawn_for = (self._span, self._bar_width(), self.store.series.version)
        if drawn_for != self._columns_for:  # a cursor move over a still run reads no bucket
            self._columns, self._columns_for = {}, drawn_for
        return super().refresh(*regions, **kwargs)

    # -- keys and mouse ------------------------------------------------------------

    def action_cursor(self, step: int) -> None:
        row = self._cursor + step
        while 0 <= row < len(self._rows) and row in self._groups:
            row += 1 if step > 0 else -1
        self._move(row)

    def action_page(self, step: int) -> None:
        self._move(self._cursor + step * max(1, self._body_height()))

    def action_first(self) -> None:
        self._move(1)

    def action_last(self) -> None:
        self._move(len(self._rows) - 1)

    def action_choose(self) -> None:
        if (key := self.cursor_key) is not None:
            self.post_message(self.Chosen(key))

    def action_zoom(self, factor: float, at: float = 0.5) -> None:
        """Narrow (factor < 1) or widen the window around the point `at` of its width."""
        start, end = self.span()
        seconds = max(MIN_SECONDS, (end - start) * factor)
        middle = start + (end - start) * at
        self.window = (middle - seconds * at, middle + seconds * (1 - at))
        self.refresh()

    def action_pan(self, step: float) -> None:
        start, end = self.span()
        shift = (end - start) * PAN * step
        self.window = (start + shift, end + shift)
        self.refresh()

    def action_fit(self) -> None:
        self.window = None
        self.refresh()

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < self._header_height():
            return
        row = int(self.scroll_y) + offset.y - self._header_height()
        if row < len(self._rows) and row not in self._groups:
            if row == self._cursor:
                self.action_choose()
            else:
                self._move(row)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if event.ctrl or event.shift:
            event.prevent_default()
            self.action_zoom(1 / ZOOM, self._share(event.x))

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        if event.ctrl or event.shift:
            event.prevent_default()
            self.action_zoom(ZOOM, self._share(event.x))

    def on_mouse_scroll_left(self, event: events.MouseScrollLeft) -> None:
        event.prevent_default()
        self.action_pan(-0.5)

    def on_mouse_scroll_right(self, event: events.MouseScrollRight) -> None:
        event.prevent_default()
        self.action_pan(0.5)

    def _share(self, x: int) -> float:
        """Where on the bars' width the mouse is, 0 to 1 (a zoom keeps that time there)."""
        return min(1.0, max(0.0, (x - LABEL_WIDTH) / max(1, self._bar_width())))

    # -- rows ----------------------------------------------------------------------

    def _build(self) -> None:
        rows: list[str] = []
        groups: set[int] = set()
        for variant, keys in self.store.variants.items():
            groups.add(len(rows))
            rows.append(variant)
            rows += keys
        key = self.cursor_key
        self._rows, self._groups = rows, groups
        self._row_of = {key: row for row, key in enumerate(rows) if row not in groups}
        self._built_for = len(self.store.rollouts)
        self._cursor = self._row_of.get(key, 1) if key is not None else min(1, len(rows) - 1)
        set_virtual_size(self, Size(self.scrollable_content_region.width, len(rows) + self._header_height()))

    def _move(self, row: int) -> None:
        if not self._rows:
            return
        row = max(0, min(row, len(self._rows) - 1))
        while row in self._groups and row + 1 < len(self._rows):
            row += 1
        self._cursor = row
        self._scroll_to_cursor()
        self.refresh()
        if (key := self.cursor_key) is not None:
            self.post_message(self.Highlighted(key))

    def _scroll_to_cursor(self) -> None:
        top, height = int(self.scroll_y), self._body_height()
        row = self._cursor - 1 if self._cursor - 1 in self._groups else self._cursor
        if row < top:
            self.scroll_to(y=row, animate=False, immediate=True)
        elif height > 0 and self._cursor >= top + height:
            self.scroll_to(y=self._cursor - height + 1, animate=False, immediate=True)

    # -- drawing -------------------------------------------------------------------

    def _concurrency_lines(self) -> int:
        return 2 if self.size.height >= TWO_LINE_HEIGHT else 1

    def _header_height(self) -> int:
        return 2 + self._concurrency_lines() * len(self.store.variants)

    def _body_height(self) -> int:
        return max(0, self.scrollable_content_region.height - self._header_height())

    def _bar_width(self) -> int:
        return max(1, self.scrollable_content_region.width - LABEL_WIDTH)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self._style("base")
        palette = self.palette
        if palette is None or width <= LABEL_WIDTH:
            return Strip.blank(width, base)
        start, end = self._span
        header = self._header_height()
        if y == 0:
            strip = self._legend(palette, width)
        elif y == 1:
            strip = self._axis(start, end, palette)
        elif y < header:
            line = y - 2
            per = self._concurrency_lines()
            variant = list(self.store.variants)[line // per]
            strip = self._concurrency(variant, "running" if line % per == 0 else "waiting", start, end, palette)
        else:
            row = int(self.scroll_y) + y - header
            if row >= len(self._rows):
                return Strip.blank(width, base)
            if row in self._groups:
                strip = self._group(self._rows[row])
            else:
                strip = self._bar(self.store.rollouts[self._rows[row]], row == self._cursor, start, end, palette)
        return strip.crop_extend(0, width, base)

    def _legend(self, palette: Palette, width: int) -> Strip:
        """Over the bars when it fits there, else moved left into the label column
        (blank on this line); cut with "…" only when the pane is narrower than it."""
        segments: list[Segment] = []
        for name in SEGMENTS:
            segments += [Segment(GLYPHS.get(name, "█"), self._look(name, palette)), Segment(f"{LEGEND.get(name, name)} ", palette.muted)]
        segments += [Segment(ENDS[Status.FAILED], palette.error), Segment("fail ", palette.muted)]
        segments += [Segment(ENDS[Status.CANCELLED], palette.warning), Segment("cxl", palette.muted)]  # Compare's words
        legend = Strip(segments)
        if legend.cell_length > width:
            return Strip([*legend.crop(0, width - 1), Segment("…", palette.muted)])
        indent = min(LABEL_WIDTH, width - legend.cell_length)
        return Strip([Segment(" " * indent), *legend])

    def _axis(self, start: float, end: float, palette: Palette) -> Strip:
        """Time since the run's first rollout at a few round marks; the label column
        says how wide the window is (and whether it follows the run)."""
        width = self._bar_width()
        cells = [" "] * width
        origin = self.store.series.first or start
        step = _round_step((end - start) / max(1, width // 12))
        mark = math.ceil((start - origin) / step) * step + origin
        while mark < end:
            x = int((mark - start) / (end - start) * width)
            label = "|" + clock(mark - origin)
            if x + len(label) <= width and all(c == " " for c in cells[x : x + len(label) + 1]):
                cells[x : x + len(label)] = label
            mark += step
        title = f"{clock(end - start)} {'fixed' if self.window else 'all'}"
        return Strip([Segment(title.ljust(LABEL_WIDTH)[:LABEL_WIDTH], palette.muted), Segment("".join(cells), palette.muted)])

    def _concurrency(self, variant: str, what: str, start: float, end: float, palette: Palette) -> Strip:
        width = self._bar_width()
        columns = self._columns.get(variant)
        if columns is None:
            columns = self._columns[variant] = self.store.series.columns(variant, start, end, width)
        values = [column.running if what == "running" else column.waiting for column in columns]
        top = max(values, default=0)
        now = values[-1] if values else 0
        count = f" {what[:3] if what == 'running' else what[:4]} {now}"
        label = (fit(safe(variant), LABEL_WIDTH - 1 - len(count)).rstrip() + count).ljust(LABEL_WIDTH)
        bars = "".join(LEVELS[min(8, math.ceil(8 * value / top))] if top and value > 0 else " " for value in values)
        style = palette.primary if what == "running" else palette.warning
        return Strip([Segment(label, palette.muted), Segment(bars, style)])

    def _group(self, variant: str) -> Strip:
        keys = self.store.variants.get(variant, ())
        style = self._style("timeline--group")
        return Strip([Segment(f"▾ {safe(variant)}  {len(keys)} rollouts", style)])

    def _bar(self, rollout: Rollout, cursor: bool, start: float, end: float, palette: Palette) -> Strip:
        """Each piece of its time fills the cells whose middle it covers: the work is
        its pieces, not the cells."""
        self.rows_drawn += 1
        width = self._bar_width()
        label = " " + fit(safe(rollout.key), LABEL_WIDTH - 2) + " "
        segments = [Segment(label, self._style("timeline--cursor") if cursor else palette.muted)]
        horizon = rollout.ended_at if rollout.ended_at is not None else self.store.clock()
        scale = width / (end - start)
        x = 0
        mark = ENDS.get(rollout.status)
        mark_x = int((rollout.ended_at - start) * scale) if mark and rollout.ended_at is not None and start <= rollout.ended_at < end else None
        for piece_start, piece_end, name in bar_segments(rollout.times, rollout.created_at or None, horizon):
            first = max(x, math.ceil((piece_start - start) * scale - 0.5))
            last = min(width, math.ceil((piece_end - start) * scale - 0.5))
            if last <= first:
                continue
            if first > x:
                segments.append(Segment(" " * (first - x)))
            segments.append(Segment(GLYPHS.get(name, "█") * (last - first), self._look(name, palette)))
            x = last
        if x < width:
            segments.append(Segment(" " * (width - x)))
        strip = Strip(segments)
        if mark is not None and mark_x is not None:
            style = palette.error if rollout.status is Status.FAILED else palette.warning
            at = LABEL_WIDTH + min(width - 1, mark_x)
            strip = Strip.join([strip.crop(0, at), Strip([Segment(mark, style)]), strip.crop(at + 1, LABEL_WIDTH + width)])
        return strip

    def _style(self, name: str) -> Style:
        """A component class's style, looked up once (a lookup walks the ancestors)."""
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self.get_component_rich_style(name) if name != "base" else self.rich_style
        return style

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = {}

    @staticmethod
    def _look(segment: str, palette: Palette) -> Style:
        return palette.muted if segment == "waiting" else palette.error if segment == "attempt" else palette.phase(segment)


def _round_step(seconds: float) -> float:
    """The round number of seconds (1, 2, 5, 10, 15, 30 s, minutes, hours) at or above."""
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400):
        if step >= seconds:
            return float(step)
    return 86400.0 * math.ceil(seconds / 86400)
