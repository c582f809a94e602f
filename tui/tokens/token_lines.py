"""A message's tokens drawn as text on Textual's Line API, each token coloured by one
stream at a time, with a token cursor (keys and the mouse).

The tokens are laid out once per width (`token_layout`) and each stream's colours are
computed once per choice, as one numpy pass; `render_line` then costs one line's
fragments, so a 32k-token message opens and scrolls like a short one."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.color import Color
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tracewatch.core.tokens.streams import Floats, MessageTokens, Stream
from tracewatch.core.tokens.tokenizer import Piece
from tracewatch.tui.chrome.keys import bindings
from tracewatch.tui.drawing.virtual_size import set_virtual_size
from tracewatch.tui.tokens.token_layout import CHUNK, Layout

STEPS = 8
"""Colour steps on each side of a scale."""
NO_VALUE = 127
"""The level of a token the stream has no value for (scaffold, inputs): dimmed."""
HUES = {
    "flags": ("#2e9e5b", "#2e9e5b"),
    "sequential": ("#d8453b", "#d8453b"),
    "diverging": ("#3b7fd8", "#d8453b"),
}
"""(high or positive, negative) colours by scale."""
ENTROPY_HUE = "#b06ad8"
ENTROPY_FULL = 2.0
"""Nats at which entropy's colour is full."""
DIVERGING_FLOOR = {"advantage": 0.05, "mismatch": 0.5, "kl": 0.5}
"""The smallest magnitude drawn at full colour: noise of a few hundredths between
trainer and sampler should not look like a mismatch."""


def levels(stream: Stream, values: Floats | None, count: int) -> npt.NDArray[np.int16]:
    """Each token's colour step: 0 none, 1..STEPS towards the scale's colour, negative
    towards the diverging scale's other colour, NO_VALUE for no value."""
    if values is None:
        return np.zeros(count, np.int16)
    with np.errstate(all="ignore"):
        missing = np.isnan(values)
        share: Floats
        if stream.scale == "flags":
            share = (values == 1).astype(np.float64)
        elif stream.key in ("logprob", "probability"):
            probability = np.exp(values) if stream.key == "logprob" else values
            share = np.clip(1.0 - probability, 0.0, 1.0)
        elif stream.key == "entropy":
            share = np.clip(values / ENTROPY_FULL, 0.0, 1.0)
        else:
            finite = np.abs(values[np.isfinite(values)])
            span = max(DIVERGING_FLOOR.get(stream.key, 1.0), float(finite.max()) if len(finite) else 0.0)
            share = np.clip(values / span, -1.0, 1.0)
        steps = np.rint(np.nan_to_num(share, nan=0.0, posinf=1.0, neginf=-1.0) * STEPS).astype(np.int16)
    steps[missing] = NO_VALUE
    return steps


class TokenLines(ScrollView, can_focus=True):
    """The tokens of one message; `show` gives it a message, `colour` a stream."""

    BINDINGS = bindings("tokens")
    DEFAULT_CSS = """
    TokenLines {
        background: $surface;
        color: $foreground;
        overflow-x: hidden;
        overflow-y: scroll;
        scrollbar-gutter: stable;
        & > .tokens--special { color: $text-warning; text-style: bold; }
        & > .tokens--none { color: $text-muted; }
        & > .tokens--cursor { color: $background; background: $foreground; text-style: bold; }
    }
    """
    COMPONENT_CLASSES = {"tokens--special", "tokens--none", "tokens--cursor"}

    class CursorMoved(Message):
        pass

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.tokens: MessageTokens | None = None
        self.pieces: list[Piece] = []
        self.placed: Layout | None = None
        self.stream: Stream | None = None
        self.levels = np.zeros(0, np.int16)
        self.cursor: int | None = None
        self._strips: dict[int, Strip] = {}
        self._styles: dict[tuple[int, bool, bool], Style] = {}

    # -- what it shows -------------------------------------------------------------

    def show(self, tokens: MessageTokens, pieces: list[Piece], stream: Stream) -> None:
        self.tokens, self.pieces = tokens, pieces
        self.cursor = 0 if len(tokens) else None
        self.stream = stream
        self.levels = levels(stream, stream.values(tokens), len(tokens))
        self._lay_out()
        self.scroll_to(y=0, animate=False, immediate=True)
        self.post_message(self.CursorMoved())

    def colour(self, stream: Stream) -> None:
        if self.tokens is None:
            return
        self.stream = stream
        self.levels = levels(stream, stream.values(self.tokens), len(self.tokens))
        self._styles.clear()
        self._strips.clear()
        self.refresh()

    def _lay_out(self, drawing: bool = False) -> None:
        """The first screens now, the rest a chunk a turn once they are drawn
        (`_lay_out_more`): a chunk laid out before the first paint delays it. Before the
        lines have a width, nothing: the first line drawn lays them out (`drawing`),
        so the view's first paint shows the message rather than an empty view."""
        width = self.scrollable_content_region.width
        self._strips.clear()
        if width <= 0:
            self.placed = None
            return
        placed = self.placed = Layout(self.pieces, width)
        placed.reach_line(int(self.scroll_offset.y) + 2 * max(1, self.size.height))
        if drawing:  # the compositor is drawing: the size changes after it
            self.call_later(self._sized)
        else:
            self._sized()
        if not placed.done:
            self.call_after_refresh(self._lay_out_more, placed)

    def _lay_out_more(self, placed: Layout) -> None:
        if placed is not self.placed or placed.done:
            return
        placed.extend(CHUNK)
        self._sized()
        if not placed.done:
            self.call_later(self._lay_out_more, placed)

    def _sized(self) -> None:
        if self.placed is not None:
            set_virtual_size(self, Size(self.placed.width, len(self.placed)))
            self.refresh()

    def on_resize(self) -> None:
        if self.tokens is not None and (self.placed is None or self.placed.width != max(4, self.scrollable_content_region.width)):
            self._lay_out()
            self._scroll_to_cursor()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()
        self._strips.clear()

    # -- drawing ------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        index = int(self.scroll_offset.y) + y
        width = self.scrollable_content_region.width
        if self.placed is None and self.tokens is not None and width > 0:
            self._lay_out(drawing=True)
        placed = self.placed
        if placed is not None and not placed.done and index >= len(placed) - 1:
            placed.reach_line(index)
            self.call_later(self._sized)
        if placed is None or index >= len(placed):
            return Strip.blank(width, self.rich_style)
        strip = self._strips.get(index)
        if strip is None:
            segments = [Segment(text, self._style(token)) for token, text in placed.fragments(index)]
            strip = Strip(segments).extend_cell_length(width, self.rich_style).crop(0, width)
            if placed.done or index < len(placed.tokens) - 1:  # a line still being laid out may grow
                self._strips[index] = strip
        return strip

    def _style(self, token: int) -> Style:
        key = (int(self.levels[token]), self.pieces[token].special, token == self.cursor)
        style = self._styles.get(key)
        if style is None:
            style = self._styles[key] = self._make_style(*key)
        return style

    def _make_style(self, level: int, special: bool, cursor: bool) -> Style:
        base = self.rich_style
        if cursor:
            return base + self.get_component_rich_style("tokens--cursor")
        if level == NO_VALUE:
            base += self.get_component_rich_style("tokens--none")
        if special:
            base += self.get_component_rich_style("tokens--special")
        if level == NO_VALUE:
            return base
        if level == 0 or self.stream is None:
            return base
        positive, negative = HUES[self.stream.scale]
        if self.stream.key == "entropy":
            positive = ENTROPY_HUE
        hue = Color.parse(positive if level > 0 else negative)
        background = self.background_colors[1].blend(hue, abs(level) / STEPS * 0.85)
        style = Style(bgcolor=background.rich_color)
        if abs(level) > STEPS // 2:
            style += Style(color=background.get_contrast_text(1.0).rich_color)
        return base + style

    def _forget_token(self, token: int | None) -> None:
        if token is None or self.placed is None or token >= len(self.placed.first_line):
            return
        first = self.placed.first_line[token]
        last = first
        while last + 1 < len(self.placed) and self.placed.tokens[last + 1][:1] == [token]:
            last += 1
        for line in range(first, last + 1):
            self._strips.pop(line, None)
            self.refresh(Region(0, line - int(self.scroll_offset.y), self.size.width, 1))

    # -- the cursor -----------------------------------------------------------------

    def move_to(self, token: int) -> None:
        if self.tokens is None or not len(self.tokens):
            return
        token = max(0, min(len(self.tokens) - 1, token))
        if self.placed is not None:
            self.placed.reach_token(token)
            self._sized()
        old, self.cursor = self.cursor, token
        self._forget_token(old)
        self._forget_token(token)
        self._scroll_to_cursor()
        self.post_message(self.CursorMoved())

    def _scroll_to_cursor(self) -> None:
        if self.cursor is None or self.placed is None:
            return
        self.placed.reach_token(self.cursor)
        line = self.placed.first_line[self.cursor]
        top, height = int(self.scroll_offset.y), self.scrollable_content_region.height
        if line < top:
            self.scroll_to(y=line, animate=False, immediate=True)
        elif line >= top + height:
            self.scroll_to(y=line - height + 1, animate=False, immediate=True)

    def _token_at_line(self, line: int, column: int) -> int | None:
        if self.placed is None or not 0 <= line < len(self.placed):
            return None
        at = 0
        for token, text in self.placed.fragments(line):
            at += cell_len(text)
            if column < at:
                return token
        on_line = self.placed.tokens[line]
        return on_line[-1] if on_line else None

    def _column(self) -> int:
        if self.cursor is None or self.placed is None:
            return 0
        at = 0
        for token, text in self.placed.fragments(self.placed.first_line[self.cursor]):
            if token == self.cursor:
                return at
            at += cell_len(text)
        return at

    def action_token(self, step: int) -> None:
        self.move_to((self.cursor or 0) + step)

    def action_line(self, step: int) -> None:
        if self.cursor is None or self.placed is None:
            return
        self.placed.reach_token(self.cursor)
        line = self.placed.first_line[self.cursor] + step
        self.placed.reach_line(line)
        self._sized()
        line = max(0, min(len(self.placed) - 1, line))
        while 0 < line < len(self.placed) - 1 and not self.placed.tokens[line]:
            line += 1 if step > 0 else -1
        token = self._token_at_line(line, self._column())
        if token is not None:
            self.move_to(token)

    def action_page(self, step: int) -> None:
        self.action_line(step * max(1, self.scrollable_content_region.height - 1))

    def action_first_token(self) -> None:
        self.move_to(0)

    def action_last_token(self) -> None:
        if self.tokens is not None:
            self.move_to(len(self.tokens) - 1)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        token = self._token_at_line(int(self.scroll_offset.y) + offset.y, offset.x)
        if token is not None:
            self.move_to(token)
