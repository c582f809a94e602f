"""The token view: one message of a trace as its tokens, coloured by one stream at a
time, with a header that sums the message up and a line that gives every stream's
value at the token under the cursor. Live: while it shows a trace's newest message, a
message that lands moves it on to that one."""

from __future__ import annotations

import math
import sys

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from tracewatch.core.session.trace_state import TraceState
from tracewatch.core.tokens.streams import MessageTokens, Stream, read_message, streams_of, token_values
from tracewatch.core.tokens.summary import Summary, summarize
from tracewatch.core.tokens.tokenizer import Piece, TokenText
from tracewatch.tui.drawing.literal import safe
from tracewatch.tui.tokens.token_layout import id_piece
from tracewatch.tui.tokens.token_lines import TokenLines

REFRESH = 0.25
MAX_EXP = math.log(sys.float_info.max)
"""A logprob past this (a hostile source's) has no float probability: shown as inf."""
"""How often the view looks for new messages in the trace it shows."""
LEGEND = {
    "logprob": "red: the sampler found the token unlikely (the deeper, the lower p)",
    "probability": "red: low probability (the deeper, the lower p)",
    "mask": "green: trained (sampled) tokens",
    "is_content": "green: message body; plain: template scaffold",
    "advantage": "blue: positive credit, red: negative (0 plain)",
    "entropy": "purple: the trainer's policy was unsure (full at 2 nats)",
    "mismatch": "trainer minus sampler logprob: red where the trainer finds the token less likely, blue more",
    "kl": "sampler minus reference logprob: blue where the policy moved towards the token, red away",
    "is_masked": "green: tokens the trainer masked out of its loss (prime-rl's is_masked)",
}
"""What the colours of each stream say; a loss-weight stream's: blue positive, red negative."""


def number(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}f}"


def summary_text(summary: Summary) -> Text:
    text = Text(end="")
    text.append(f"{summary.tokens:,} tokens", style="bold")
    text.append(f" · {summary.trained:,} trained")
    if summary.content is not None:
        text.append(f" · {summary.content:,} content")
    if summary.mean_logprob is not None:
        text.append(f" · mean logprob {number(summary.mean_logprob)}")
    if (lowest := summary.lowest_logprob) is not None:
        text.append(f" · lowest {number(lowest.value)} at #{lowest.index}")
    if (worst := summary.worst_mismatch) is not None:
        text.append(f" · worst trainer-sampler {number(worst.value)} at #{worst.index}")
    return text


def values_text(tokens: MessageTokens, piece: Piece, index: int) -> Text:
    """Every stream's value at one token, by the node's own names."""
    row = token_values(tokens, index)
    text = Text(end="")
    text.append(f"#{index} ", style="bold")
    text.append(f"id {row.pop('id')} ")
    text.append(repr(piece.text) if not piece.special else piece.text, style="bold")
    del row["index"]
    mismatch = row.pop("mismatch")
    for name, value in row.items():
        if value is None:
            continue
        shown = ("yes" if value else "no") if isinstance(value, bool) else number(value, 4)
        text.append(f" · {safe(name)} {shown}")
    logprob = row.get("logprobs")
    if logprob is not None:
        text.append(f" · p {number(math.exp(logprob) if logprob < MAX_EXP else math.inf if logprob > 0 else math.nan)}")
    if mismatch is not None:
        text.append(f" · trainer-sampler {number(mismatch, 4)}")
    return text


class TokenScreen(Screen[None]):
    """Esc or t goes back to the trace."""

    DEFAULT_CSS = """
    TokenScreen {
        & #tokens-head-box { height: auto; max-height: 8; background: $boost; scrollbar-size-vertical: 1; }
        & #tokens-head { height: auto; padding: 0 1; }
        & #tokens-body { height: 1fr; }
        & #tokens-at { height: 1; padding: 0 1; background: $boost; text-wrap: nowrap; text-overflow: ellipsis; }
    }
    """

    def __init__(self, trace: TraceState, node: int, text: TokenText | None, note: str, title: str, stream: str = "logprob") -> None:
        super().__init__()
        self.trace = trace
        self.node = node
        self.text = text
        self.note = note
        self.title_text = title
        self.stream_key = stream
        self.tokens: MessageTokens | None = None
        self.streams: tuple[Stream, ...] = ()
        self._revision = trace.revision
        self._count = len(trace.nodes)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="tokens-head-box", can_focus=False):  # a header taller than its room scrolls, with a bar that says so
            yield Static(id="tokens-head", markup=False)
        yield TokenLines(id="tokens-body")
        yield Static(id="tokens-at", markup=False)

    @property
    def lines(self) -> TokenLines:
        return self.query_one(TokenLines)

    def on_mount(self) -> None:
        self.lines.focus()
        self.load(self.node)  # before the first paint, which then shows it: laid out when the lines get their size
        self.set_interval(REFRESH, self._follow)

    def load(self, node: int) -> None:
        """Show node `node` of the trace (read and decoded now: arrays stay packed in
        the store until a view asks for one message)."""
        nodes = self.trace.nodes
        self.node = max(0, min(len(nodes) - 1, node))
        tokens = self.tokens = read_message(nodes[self.node]) if nodes else read_message({})
        ids: list[int] = tokens.ids.tolist()
        pieces = self.text.pieces(ids) if self.text is not None else [id_piece(token) for token in ids]
        self.streams = streams_of(tokens)
        self.lines.show(tokens, pieces, self._stream())
        self._draw_head()

    def _stream(self) -> Stream:
        return next((stream for stream in self.streams if stream.key == self.stream_key), self.streams[0])

    def _follow(self) -> None:
        """A message that landed while the newest one was shown is shown in its place."""
        if self.trace.revision == self._revision:
            return
        self._revision = self.trace.revision
        count = len(self.trace.nodes)
        newest = self.node >= self._count - 1
        self._count = count
        if newest and count - 1 > self.node:
            self.load(count - 1)
        else:
            self._draw_head()

    def _draw_head(self) -> None:
        tokens = self.tokens
        if tokens is None:
            return
        message = self.trace.nodes[self.node].get("message") if self.trace.nodes else None
        role = message.get("role") if isinstance(message, dict) else None
        text = Text(end="")
        # numbered as the transcript and `tokens --node` number it: #0 is the first node
        text.append(f"{safe(self.title_text)} · {safe(str(role or 'message'))} #{self.node}", style="bold")
        text.append(f" · {self._count} messages (#0-#{self._count - 1})\n", style="dim")
        text.append_text(summary_text(summarize(tokens)))
        text.append("\ncolour (, .): ")
        for stream in self.streams:
            shown = stream.values(tokens) is not None
            style = "bold reverse" if stream.key == self._stream().key else "" if shown else "dim"
            text.append(safe(stream.label), style=style)
            text.append("  ")
        stream = self._stream()
        text.append(f"\n{LEGEND.get(stream.key, 'blue: positive weight, red: negative (0 plain)')}; dim: no value on that token", style="dim")
        if stream.values(tokens) is None:
            text.append(f"\nthis message carries no {safe(stream.label)}", style="bold")
        if not len(tokens):
            text.append("\nthis message carries no token ids (an eval stream or a renderer without them): nothing to colour", style="dim")
        for finding in tokens.findings:
            text.append(f"\n⚠ {safe(finding)}", style="bold")
        text.append(f"\ntext: {safe(self.note)}", style="dim")
        self.query_one("#tokens-head", Static).update(text)

    def on_token_lines_cursor_moved(self) -> None:
        lines = self.lines
        at = self.query_one("#tokens-at", Static)
        if lines.tokens is None or lines.cursor is None:
            at.update(Text("no tokens"))
            return
        at.update(values_text(lines.tokens, lines.pieces[lines.cursor], lines.cursor))

    def action_colour(self, step: int) -> None:
        if not self.streams:
            return
        keys = [stream.key for stream in self.streams]
        at = keys.index(self._stream().key)
        self.stream_key = keys[(at + step) % len(keys)]
        self.lines.colour(self._stream())
        self._draw_head()

    def action_message(self, step: int) -> None:
        self.load(self.node + step)

    def action_back(self) -> None:
        self.dismiss(None)
