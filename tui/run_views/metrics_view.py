"""A training run's own metrics in the Trends tab (a session's `RunMetrics`: a followed
prime-rl run's `metrics.jsonl` and eval plan): each key a chart by step (by time for
rows written with a null step) under its producer, with a value axis whose range is
labelled and a step axis; a key filter, smoothing, and a line per planned eval step.

Drawn with our own blocks, as the per-variant trends are (`trends_view.bars`), not a
plotting library: the charts are text in the theme's palette that a test reads, and a
run writing hundreds of keys costs one widget rather than one plot widget a key.

The app imports this module only for a session that has metrics (numpy comes with it,
as the session's reader brought it already). Drawn again only when the session's
`metrics_version` moved (rows arrived, the plan or its counts changed) or the filter,
the smoothing or the width did, and a key charted again only when its own rows moved:
the rows are the reader's, in memory, never read from the file here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rich.text import Text
from textual.widget import Widget

from tracewatch.core.run.durations import clock
from tracewatch.core.run.metric_charts import SMOOTHING, MetricChart, charts_of, columns, fraction
from tracewatch.core.session.contracts import EvalLine, RunMetrics
from tracewatch.tui.chrome.keys import bindings
from tracewatch.tui.drawing.literal import safe
from tracewatch.tui.drawing.palette import Palette
from tracewatch.tui.run_views.trends_view import bars

CHART_ROWS = 4
LABEL = 10
"""The value axis's labels, left of the tick."""
MAX_CHARTS = 40
"""Charts drawn at most: past them the filter narrows (a run can write thousands of keys)."""
PLAN_BAR = 20


def value_text(value: float) -> str:
    """A value in at most `LABEL` characters, whatever its size."""
    text = f"{value:.4g}"
    return text if len(text) <= LABEL else f"{value:.2e}"


def smoothing_text(weight: float | None) -> str:
    return "off" if weight is None else f"EMA {weight:g}"


def matches(key: str, words: Sequence[str]) -> bool:
    lowered = key.lower()
    return all(word in lowered for word in words)


class MetricsView(Widget, can_focus=True):
    """The run's metrics, producer by producer, then the eval plan."""

    DEFAULT_CSS = "MetricsView { height: auto; }"
    BINDINGS = bindings("metrics")

    def __init__(self, metrics: RunMetrics, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.metrics = metrics
        self.palette: Palette | None = None
        self.smoothing = 0
        """Where in `SMOOTHING` the charts are."""
        self.key_filter = ""
        self.charts: list[MetricChart] = []
        """What is charted now, in the order drawn."""
        self.left_out = 0
        """Keys that match the filter past `MAX_CHARTS`."""
        self.plan: list[EvalLine] = []
        self._drawn: tuple[int, int, str, int] | None = None
        self._made: dict[str, tuple[tuple[int, int], int, list[MetricChart]]] = {}
        """Each key's charts, with the stamp and smoothing they were made at: a key
        whose rows did not move is not charted again (most move once a step)."""
        self._text = Text()

    @property
    def weight(self) -> float | None:
        return SMOOTHING[self.smoothing]

    def show(self) -> None:
        """Redraw if the run's metrics moved since the last drawing."""
        if self._drawn is None or self._drawn[0] != self.metrics.metrics_version:
            self.refresh(layout=True)

    def set_filter(self, text: str) -> None:
        self.key_filter = text
        self.refresh(layout=True)

    def action_cycle_smoothing(self) -> None:
        self.smoothing = (self.smoothing + 1) % len(SMOOTHING)
        self.refresh(layout=True)

    def render(self) -> Text:
        palette = self.palette
        if palette is None:
            return Text()
        state = (self.metrics.metrics_version, self.smoothing, self.key_filter, self.size.width)
        if state != self._drawn:
            self._drawn = state
            self._text = self._draw(palette, max(8, self.size.width - LABEL - 2))
        return self._text

    def _chart(self) -> None:
        """The charts of the keys the filter keeps, at most `MAX_CHARTS`, producer by producer."""
        metrics, words = self.metrics, self.key_filter.lower().split()
        keys = [key for key in metrics.metric_keys if matches(key, words)]
        charts: list[MetricChart] = []
        made: dict[str, tuple[tuple[int, int], int, list[MetricChart]]] = {}
        for key in keys:
            if len(charts) >= MAX_CHARTS:
                break
            stamp, known = metrics.metric_stamp(key), self._made.get(key)
            if known is not None and known[:2] == (stamp, self.smoothing):
                made[key] = known
            elif (points := metrics.metric_points(key)) is not None:
                made[key] = (stamp, self.smoothing, charts_of(key, points.step, points.time, points.value, points.producer, metrics.metric_producers, self.weight))
            charts += made[key][2] if key in made else []
        self._made = made
        self.left_out = max(0, len(keys) - len({chart.key for chart in charts[:MAX_CHARTS]}))
        self.charts = sorted(charts[:MAX_CHARTS], key=lambda chart: (chart.by_time, chart.producer or "", chart.key))
        self.plan = list(metrics.eval_lines())

    def _draw(self, palette: Palette, width: int) -> Text:
        self._chart()
        text = Text(no_wrap=True, end="")
        text.append("The run's metrics", style="bold")
        shown = f"'{safe(self.key_filter)}'" if self.key_filter else "every key"
        text.append(f"  smoothing: {smoothing_text(self.weight)} (m) · keys: {shown} (/ to filter)\n", style=palette.muted)
        if (skipped := self.metrics.metrics_skipped) is not None:
            text.append(f"metrics.jsonl: {safe(skipped)}\n", style=palette.warning)
        if self.plan:
            self._draw_plan(text, palette)
        if not self.metrics.metric_keys:
            text.append("no metric rows yet\n", style=palette.muted)
        elif not self.charts:
            text.append("no key matches the filter (Esc clears it)\n" if self.key_filter else "no value to chart yet\n", style=palette.muted)
        section: tuple[bool, str | None] | None = None
        for chart in self.charts:
            if (chart.by_time, chart.producer) != section:
                section = (chart.by_time, chart.producer)
                text.append(f"\n{safe(chart.producer or 'no producer')}{' (rows without a step, by time)' if chart.by_time else ''}\n", style="bold")
            self._draw_chart(text, chart, palette, width)
        if self.left_out:
            text.append(f"\n{self.left_out} more key(s) match: type after / to narrow\n", style=palette.warning)
        return text

    def _draw_plan(self, text: Text, palette: Palette) -> None:
        text.append("\neval plan\n", style="bold")
        for line in self.plan:
            share = 0.0 if line.expected <= 0 else min(1.0, line.done / line.expected)
            filled = round(share * PLAN_BAR)
            text.append(f"{safe(line.env)[:16]:<16} step {line.step:<6} ", style=palette.muted)
            text.append("█" * filled, style=palette.success)
            text.append("░" * (PLAN_BAR - filled), style=palette.muted)
            text.append(f" {line.done}/{line.expected} done")
            if line.in_flight:
                text.append(f" · {line.in_flight} in flight", style=palette.primary)
            if line.unknown_step:
                text.append(f" · {line.unknown_step} of the env's finished evals have no step yet", style=palette.muted)
            text.append("\n")

    def _draw_chart(self, text: Text, chart: MetricChart, palette: Palette, width: int) -> None:
        text.append(safe(chart.key), style="bold")
        notes = [f"{len(chart.x)} point(s)"]
        if chart.not_finite:
            notes.append(f"{chart.not_finite} not finite, skipped")
        if chart.went_back:
            notes.append(f"{'time' if chart.by_time else 'the step'} went back {chart.went_back} time(s)")
        if not len(chart.x):
            text.append(f"  {' · '.join(notes)}\n", style=palette.muted)
            return
        text.append(f"  last {value_text(chart.last)} · {' · '.join(notes)}\n", style=palette.muted)
        low, high = chart.low, chart.high
        values = columns(chart, width)
        cells = fraction_cells(values, low, high)
        labels = [value_text(high)] + [""] * (CHART_ROWS - 2) + [value_text(low)]
        for label, row in zip(labels, bars(cells, 0.0, 1.0, CHART_ROWS), strict=True):
            text.append(f"{label:>{LABEL}}┤", style=palette.muted)
            text.append(row + "\n", style=palette.primary)
        text.append(" " * LABEL + "└" + "─" * width + "\n", style=palette.muted)
        text.append(" " * (LABEL + 1) + x_axis(chart, width) + "\n", style=palette.muted)


def fraction_cells(values: list[float], low: float, high: float) -> list[float | None]:
    """Each column's height as a share of the chart's, the lowest value one eighth of a
    row tall (so it shows), a flat series half way."""
    shares = fraction(np.array(values, dtype=np.float64), low, high).tolist() if high > low else [0.5] * len(values)
    floor = 1 / (CHART_ROWS * 8)
    return [floor + share * (1 - floor) for share in shares]


def x_axis(chart: MetricChart, width: int) -> str:
    """The first and last step (or the time since the first row) under the chart, and
    what the axis is in the middle."""
    first, last = float(chart.x[0]), float(chart.x[-1])
    if chart.by_time:
        span = last - first
        left, right, name = "0:00", clock(span) if span < 1e9 else f"{span:.3g}s", "time"
    else:
        left, right, name = step_text(first), step_text(last), "step"
    cells = [" "] * width
    for label, at in ((left, 0), (name, (width - len(name)) // 2), (right, width - len(right))):
        at = max(0, min(at, width - len(label)))
        cells[at : at + len(label)] = label[:width]
    return "".join(cells[:width])


def step_text(step: float) -> str:
    return f"{int(step)}" if abs(step) < 1e15 else f"{step:.3g}"
