"""Trends over the run: each variant's metrics (`tracewatch.core.run.trends`) as sparklines on its
card and, in the Trends tab, as bar charts with a value axis and a time axis.

Drawn with block characters in Rich text rather than a plotting library: the values
are a few hundred columns of sums the run's buckets already hold, the theme's palette
colours them like every other view, and a chart is text a snapshot test can read;
textual-plotext would add plotext and its own colours for line plots these bars do not
need."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from tracewatch.core.run.durations import clock
from tracewatch.core.run.series import Column
from tracewatch.core.run.trends import METRICS, Metric, set_apart
from tracewatch.core.session.contracts import StoreView
from tracewatch.tui.drawing.literal import safe
from tracewatch.tui.drawing.palette import Palette

LEVELS = "▁▂▃▄▅▆▇█"
CHART_ROWS = 3
AXIS_WIDTH = 20
"""The variant's name and the value axis left of the bars."""
MIN_WINDOW = 10.0
"""The shortest stretch of time the trends span (a run's first seconds)."""


def sparkline(values: Sequence[float | None]) -> str:
    """One cell a value, scaled from 0 to the largest; a blank where there is none.
    Divided before it is multiplied: 8 times a reward of 1e308 is past any float."""
    top = max((v for v in values if v is not None), default=0.0)
    return "".join(
        " " if v is None else LEVELS[min(7, max(0, math.ceil(v / top * 8) - 1))] if top > 0 and v > 0 else "▁" for v in values
    )


def run_window(store: StoreView) -> tuple[float, float] | None:
    """From the run's first event to now (the latest event in a replay or a file), an
    hour past the latest event at most (a finished run left open does not shrink)."""
    series = store.series
    if series.first is None:
        return None
    last = (series.last or series.first) + series.width  # the bucket of the latest event, whole
    end = max(last, min(store.clock(), last + 3600))
    return series.first, max(end, series.first + MIN_WINDOW)


def card_trends(store: StoreView, variant: str, width: int, palette: Palette) -> Text:
    """What a variant card shows after its name: finished per minute and the rolling
    mean reward as sparklines of `width` cells."""
    text = Text(no_wrap=True, end="")
    window = run_window(store)
    if window is None or width < 4:
        return text
    count = chart_columns(store, window, width)
    columns = store.series.columns(variant, *window, count)
    for metric, label in ((METRICS[0], "/min"), (METRICS[1], "reward")):
        text.append("  ")
        values = metric.values(columns)
        text.append(sparkline([values[cell * count // width] for cell in range(width)]), style=palette.primary)
        text.append(f" {label}", style=palette.muted)
    return text


def chart_columns(store: StoreView, window: tuple[float, float], width: int) -> int:
    """Columns no narrower than a bucket (a narrower one would hold a whole bucket or
    nothing), at most one a cell; each is drawn over `width / columns` cells."""
    return max(1, min(width, int((window[1] - window[0]) / store.series.width)))


def bars(values: Sequence[float | None], low: float, high: float, rows: int) -> list[str]:
    """Rows of a bar chart, top first: each value a column of eighth blocks from `low`."""
    span = high - low
    lines = []
    for row in reversed(range(rows)):
        cells = []
        for value in values:
            if value is None or span <= 0:
                cells.append(" ")
                continue
            eighths = round((value - low) / span * rows * 8)
            filled = eighths - row * 8
            cells.append("█" if filled >= 8 else LEVELS[filled - 1] if filled > 0 else " ")
        lines.append("".join(cells))
    return lines


def number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}" if abs(value) < 100 else f"{value:.0f}"


class TrendsView(Widget):
    """Every metric, each variant's chart under its title, one time axis per metric."""

    DEFAULT_CSS = "TrendsView { height: auto; }"

    def __init__(self, store: StoreView, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self.palette: Palette | None = None
        self._version = -1

    def show(self) -> None:
        """Redraw when the run moved (or the clock, while it runs)."""
        self.refresh(layout=self._version == -1)
        self._version = self.store.series.version

    def render(self) -> Text:
        palette = self.palette
        window = run_window(self.store)
        if palette is None or window is None:
            return Text("no rollout has ended yet", style="dim")
        width = max(8, self.size.width - AXIS_WIDTH - 1)
        start, end = window
        columns = {name: self.store.series.columns(name, start, end, chart_columns(self.store, window, width)) for name in self.store.variants}
        text = Text(no_wrap=True, end="")
        if (partial := self.store.partial) is not None:
            text.append(f"so far: {safe(partial)}; the trends fill in as it reads\n", style=palette.warning)
        for metric in METRICS:
            self._chart(text, metric, columns, palette)
            text.append(" " * AXIS_WIDTH + self._axis(start, end, width) + "\n", style=palette.muted)
        return text

    def _chart(self, text: Text, metric: Metric, columns: dict[str, list[Column]], palette: Palette) -> None:
        text.append(metric.title + "\n", style="bold")
        values = {name: metric.values(cols) for name, cols in columns.items()}
        known = [v for series in values.values() for v in series if v is not None]
        low, high = min(0.0, *known) if known else 0.0, max(known, default=0.0)
        if metric.key in ("reward", "reward_all") and known and 0 <= min(known) and max(known) <= 1:
            high = 1.0  # a reward in [0, 1] is read against 1
        width = max(8, self.size.width - AXIS_WIDTH - 1)
        for name, series in values.items():
            latest = next((v for v in reversed(series) if v is not None), None)
            rows = bars([series[cell * len(series) // width] for cell in range(width)], low, high, CHART_ROWS)
            labels = [
                f"{safe(name)[:12]:<12} {number(high):>6}┤",
                f"{'now ' + number(latest) + metric.unit if latest is not None else '':<13.13}{'':>6}┤",
                f"{'':<12} {number(low):>6}┼",
            ]
            for label, row in zip(labels, rows):
                text.append(label[:AXIS_WIDTH].rjust(AXIS_WIDTH), style=palette.muted)
                text.append(row + "\n", style=palette.primary)
            if metric.key == "finished" and any(apart := set_apart(columns[name])):
                text.append(" " * AXIS_WIDTH + f"not counted: {apart[0]:,} cancelled, {apart[1]:,} never sent\n", style=palette.muted)

    @staticmethod
    def _axis(start: float, end: float, width: int) -> str:
        """Time since the run began at the left, middle and right of the bars."""
        cells = [" "] * width
        for share in (0.0, 0.5, 1.0):
            label = clock((end - start) * share)
            at = min(width - len(label), int(share * width))
            cells[at : at + len(label)] = label
        return "".join(cells)
