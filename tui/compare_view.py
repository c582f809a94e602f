"""The Compare tab: per task, each variant's finished rollouts side by side (mean
reward, passes of k, turns, time, errors), each variant's mean reward ± standard
error, and the tasks where the variants disagree, marked."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from core.session.compare import Comparison, cell_text, compare_store
from core.session.store import RolloutStore
from tui.format import PALETTE_CLASSES, Palette, safe


def comparison_table(comparison: Comparison, palette: Palette) -> RenderableType:
    table = Table(box=None, padding=(0, 1), header_style="bold", expand=False)
    table.add_column("task", no_wrap=True, overflow="ellipsis", max_width=32)
    for name in comparison.variants:
        table.add_column(Text(safe(name)), justify="right", no_wrap=True)
    table.add_column("")
    disagree = set(comparison.disagreements())
    for task, cells in comparison.tasks.items():
        differs = task in disagree
        row: list[Text] = [Text(safe(task[1]), style=palette.warning if differs else "")]
        for name in comparison.variants:
            cell = cells.get(name)
            style = palette.success if cell is not None and cell.passed else palette.error if cell is not None and cell.k else palette.muted
            row.append(Text(cell_text(cell), style=style))
        row.append(Text("← differ" if differs else "", style=palette.warning))
        table.add_row(*row)
    summary = Text()
    for name in comparison.variants:
        s = comparison.summary(name)
        mean = "n/a" if s.mean is None else f"{s.mean:.3f}" + (f" ± {s.stderr:.3f}" if s.stderr is not None else "")
        summary.append(f"{safe(name)}", style="bold")
        summary.append(f"  mean reward {mean} · pass@k {s.passed}/{s.tasks} tasks\n")
    summary.append(f"variants disagree on {len(disagree)} of {len(comparison.tasks)} tasks", style=palette.warning if disagree else palette.muted)
    legend = Text("each cell: mean reward (passes/k) mean turns, mean time, errors!", style=palette.muted)
    return Group(table, Text(""), summary, legend)


class CompareView(Widget):
    """Redrawn once a second while its tab shows (finished rollouts only change it)."""

    DEFAULT_CSS = "CompareView { height: auto; }"
    COMPONENT_CLASSES = PALETTE_CLASSES

    def __init__(self, store: RolloutStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.palette: Palette

    def on_mount(self) -> None:
        self.palette = Palette(self)

    def render(self) -> RenderableType:
        comparison = compare_store(self.store)
        if not comparison.tasks:
            return Text("no finished rollouts yet: the comparison fills in as they end", style=self.palette.muted)
        return comparison_table(comparison, self.palette)
