"""Where a rollout's time went: its phases as a waterfall drawn to scale (open spans
grow to now), and each phase's p50/p95 per variant side by side."""

from __future__ import annotations

import math
from typing import NamedTuple

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from tracewatch.core.run.durations import span_text
from tracewatch.core.session.contracts import StoreView
from tracewatch.core.session.phases import DURATION_KEYS
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.wire.protocol import AGENT_PARTS, PHASES, WireTiming
from tracewatch.tui.drawing.literal import safe
from tracewatch.tui.drawing.palette import Palette

LABEL_WIDTH = 11
NARROW = 100
"""Below this width the per-variant table is below the fold (80x24): each bar also
shows its variant's p50/p95 for that phase."""


class _Row(NamedTuple):
    label: str
    start: float
    """Seconds after the trace's start."""
    seconds: float
    open: bool
    glyph: str


def _tail(row: _Row, typical: dict[str, tuple[float, float]] | None) -> str:
    """What follows a bar: its duration, then the variant's p50/p95 for that phase."""
    tail = f" {span_text(row.seconds)}{' …' if row.open else ''}"
    phase = row.label.strip(" └")
    if typical is not None and phase in typical:
        p50, p95 = typical[phase]
        tail += f"  p50/p95 {span_text(p50)}/{span_text(p95)}"
    return tail


def _cell(at: float, bar_width: int, nearest: bool = False) -> int:
    """A bar's end in cells, within the bar's width whatever a source's numbers (huge,
    negative, infinite, NaN) make of it: a bar of 10^17 cells was a MemoryError."""
    if not math.isfinite(at):
        return bar_width if at > 0 else 0
    at = min(max(at, 0.0), float(bar_width))
    return round(at) if nearest else int(at)


def waterfall(
    timing: WireTiming, horizon: float, width: int, palette: Palette, typical: dict[str, tuple[float, float]] | None = None
) -> Text:
    """One line per phase: a bar from its start to its end (or `horizon` while open) on a
    shared scale; the agent line splits into model and harness time below it. With
    `typical`, each line ends with that phase's p50/p95 for comparison, if the pane has
    room for it. The bars get what the label and the widest line's numbers leave: they
    give way, the numbers never."""
    spans: list[tuple[str, float, float, bool]] = []
    for name in PHASES:
        span = timing.get(name) or {}
        start, end = span.get("start") or 0.0, span.get("end") or 0.0
        if start:
            spans.append((name, start, end or max(horizon, start), not end))
    text = Text(no_wrap=True, end="")
    if not spans:
        return text.append("no timing yet", style=palette.muted)
    origin = timing.get("start") or spans[0][1]
    rows: list[_Row] = []
    agent = timing.get("agent") or {}
    for phase, start, end, open_ in spans:
        rows.append(_Row(phase, start - origin, end - start, open_, "█"))
        if phase == "agent":
            # model then harness, end to end under the agent bar: their sum is its length
            # (they interleave in time; the split is what the bars show)
            done = start - origin
            for part, glyph in zip(AGENT_PARTS, "█▒"):
                seconds = float((agent.get(part) or {}).get("duration") or 0.0)
                if seconds:
                    rows.append(_Row(f" └ {part}", done, seconds, False, glyph))
                    done += seconds
    # the scale spans every bar, the agent's parts too (a source's parts can outrun the agent)
    total = max(max((row.start + row.seconds for row in rows), default=0.0), 1e-6)
    tails = [_tail(row, typical) for row in rows]
    if LABEL_WIDTH + 1 + max(map(len, tails)) > width:  # too narrow for p50/p95: left out, not cut
        tails = [_tail(row, None) for row in rows]
    bar_width = max(1, width - LABEL_WIDTH - max(map(len, tails)))
    scale = bar_width / total
    for row, tail in zip(rows, tails):
        # cells from the rounded ends, so the agent's parts end where the agent does
        first, last = _cell(row.start * scale, bar_width), _cell((row.start + row.seconds) * scale, bar_width, nearest=True)
        style = palette.phase(row.label.strip(" └"))
        text.append(f"{row.label:<{LABEL_WIDTH}}", style=style)
        text.append(" " * first)
        text.append(row.glyph * max(1, last - first), style=style)
        duration, _, typical_text = tail.partition("  p50/p95")
        text.append(duration, style="bold" if row.open else palette.muted)
        if typical_text:
            text.append(f"  p50/p95{typical_text}", style=palette.muted)
        text.append("\n")
    axis = span_text(total)
    text.append(f"{'':{LABEL_WIDTH}}0s{'':>{max(0, bar_width - 2 - len(axis))}}")
    text.append(axis, style=palette.muted)
    return text


def variant_table(store: StoreView, palette: Palette) -> Table:
    """Phase p50/p95 over finished rollouts, one column per variant."""
    table = Table(box=None, padding=(0, 1), title_justify="left", header_style="bold")
    table.add_column("phase")
    stats = {name: store.stats(name) for name in store.variants}
    for name in stats:
        table.add_column(Text(safe(name)), justify="right")
    for phase in DURATION_KEYS:
        row = [Text(f"└ {phase}" if phase in AGENT_PARTS else phase, style=palette.phase(phase))]
        for variant in stats.values():
            p50_p95 = variant.phases.get(phase)
            row.append(Text(f"{span_text(p50_p95[0])} / {span_text(p50_p95[1])}" if p50_p95 else "–"))
        table.add_row(*row)
    return table


class TimingView(Widget):
    """Redrawn when the selected rollout changes, and each second while it runs."""

    DEFAULT_CSS = "TimingView { height: auto; }"

    def __init__(self, store: StoreView, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self.palette: Palette
        """The app's (`TracewatchApp._set_palette`), set before the first render."""
        self.rollout: Rollout | None = None
        self.trace_id: str | None = None
        self.now = 0.0

    def show(self, rollout: Rollout | None, trace_id: str | None, now: float) -> None:
        self.rollout, self.trace_id, self.now = rollout, trace_id, now
        self.refresh(layout=True)

    def render(self) -> RenderableType:
        palette = self.palette
        head = Text(no_wrap=True, overflow="ellipsis")
        body: RenderableType = Text("select a rollout to see its phases", style=palette.muted)
        rollout = self.rollout
        if rollout is not None:
            head.append(f"{safe(rollout.variant)} · {safe(rollout.task_label)}", style="bold")
            trace = rollout.traces.get(self.trace_id or "") or rollout.primary
            if trace is not None:
                horizon = rollout.ended_at if rollout.status.finished and rollout.ended_at else self.now
                typical = self.store.stats(rollout.variant).phases if self.size.width < NARROW else None
                body = waterfall(trace.timing, horizon, self.size.width, palette, typical)
            elif rollout.unavailable:  # its traces left memory and could not be read back
                body = Text(safe(rollout.unavailable), style=palette.error)
            else:
                body = Text("no trace yet", style=palette.muted)
        if isinstance(body, Text):
            body.end = "\n"  # the waterfall ends without one; the caption needs a blank line above
        caption = Text("\nphase p50 / p95 per variant (finished rollouts)", style="bold")
        if (partial := self.store.partial) is not None:
            caption.append(f" · partial: {safe(partial)}", style=palette.warning)
        return Group(head, body, caption, variant_table(self.store, palette))
