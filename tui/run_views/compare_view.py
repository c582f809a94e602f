"""The Compare tab: per task, each variant's scored rollouts side by side (mean
reward, passes of k, turns, time, errors) with its failed and cancelled ones in
columns of their own, each variant's mean reward ± standard error, and the tasks
where the variants disagree, marked. A cursor moves over the
task rows; enter (or a click) asks for that task's traces side by side."""

from __future__ import annotations

import time

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import events
from textual.geometry import Region
from textual.message import Message
from textual.widget import Widget

from tracewatch.core.session.compare import COUNT_COLUMNS, Comparison, compare_store, count_texts, variant_cells
from tracewatch.core.session.contracts import StoreView
from tracewatch.tui.chrome.keys import bindings
from tracewatch.tui.drawing.literal import safe
from tracewatch.tui.drawing.palette import Palette

Task = tuple[int, str]
HEADER_ROWS = 1
"""The table's column titles sit above its first task row (no box, one line each)."""


COST_SHARE = 20
"""A comparison waits this many times the last one's cost after it (a large store's
is computed a few times a second at most, a small one's every tick), so a stream of
endings never has the tab take more than a twentieth of the loop."""


TASK_NARROWEST = 10
"""The task column gives way first, the numbers never do; it takes the rest of the
width there is, so a long task name is cut only where the pane has no room left."""


def task_width(comparison: Comparison, width: int) -> int:
    """What the task column gets of `width`: what the variants' columns (one cell
    between columns) leave, so a narrow pane still shows every number."""
    numbers = 0
    for name in comparison.variants:
        widest = max([cell_len(safe(name)), *map(len, variant_cells(comparison, name).values())])
        numbers += 1 + widest + sum(1 + len(title) for title in COUNT_COLUMNS)
    longest = max((cell_len(safe(label)) for _, label in comparison.tasks), default=4) + len(DIFFER)
    return max(TASK_NARROWEST, min(longest, width - numbers))


DIFFER = "≠ "
"""Before a task where the variants disagree (one passes, another does not)."""


def comparison_table(comparison: Comparison, palette: Palette, cursor: Task | None = None, width: int = 200) -> RenderableType:
    table = Table(box=None, padding=(0, 1), collapse_padding=True, pad_edge=False, header_style="bold", expand=False)
    table.add_column("task", no_wrap=True, overflow="ellipsis", width=task_width(comparison, width))
    texts = {name: variant_cells(comparison, name) for name in comparison.variants}
    widths = {name: max([cell_len(safe(name)), *map(len, texts[name].values())]) for name in comparison.variants}
    for name in comparison.variants:
        # cells padded to one width and left as they are: right-justified, Rich would
        # strip the padding of a cell with no retried errors and shift its parts
        table.add_column(Text(safe(name), justify="right"), justify="left", no_wrap=True)
        for title in COUNT_COLUMNS:
            table.add_column(Text(title, style=palette.muted), justify="right", no_wrap=True)
    disagree = set(comparison.disagreements())
    for task, cells in comparison.tasks.items():
        differs = task in disagree
        row: list[Text] = [Text((DIFFER if differs else " " * len(DIFFER)) + safe(task[1]), style=palette.warning if differs else "")]
        for name in comparison.variants:
            cell = cells.get(name)
            style = palette.success if cell is not None and cell.passed else palette.error if cell is not None and cell.k else palette.muted
            row.append(Text(texts[name][task].rjust(widths[name]), style=style))
            failed, cancelled = count_texts(cell)
            # a count of none is unstyled: the cursor's reverse would paint it as a block of its colour
            row += [Text(failed, style=palette.error if failed.strip() else ""), Text(cancelled, style=palette.warning if cancelled.strip() else "")]
        table.add_row(*row, style="reverse" if task == cursor else None)
    summary = Text()
    for name in comparison.variants:
        summary.append(f"{safe(name)}", style="bold")
        summary.append(f"  {comparison.summary(name).text()}\n")
    summary.append(f"{DIFFER}variants disagree on {len(disagree)} of {len(comparison.tasks)} tasks", style=palette.warning if disagree else palette.muted)
    legend = Text(
        "each cell: over the rollouts scored (done with a reward): mean reward (passes/scored) mean turns, mean time, retried errors!;"
        " a multi-agent rollout's reward is the mean of its scored traces;"
        " fail, cxl: the rollouts that failed or were cancelled (not in the mean)  ·  enter on a task: its traces side by side",
        style=palette.muted,
    )
    return Group(table, Text(""), summary, legend)


class CompareView(Widget, can_focus=True):
    """Computed again only when the store moved (a rollout added, started or ended) and
    the tab shows, so an ending shows at once and an idle tab costs nothing. The
    cursor is a task, not a row number: rows are added as tasks finish."""

    DEFAULT_CSS = "CompareView { height: auto; }"
    BINDINGS = bindings("compare")

    class TaskChosen(Message):
        """Enter or a click on a task row: open its traces side by side."""

        def __init__(self, task: Task) -> None:
            super().__init__()
            self.chosen = task

    def __init__(self, store: StoreView, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self.palette: Palette
        """The app's (`TracewatchApp._set_palette`), set before the first render."""
        self.cursor_task: Task | None = None
        self._comparison: Comparison | None = None
        self._version = -1
        self._next = 0.0
        """When (monotonic) `follow` may compute again: see COST_SHARE."""

    @property
    def comparison(self) -> Comparison:
        """The store compared, computed again only if it moved since."""
        if self._comparison is None or self._version != self.store.version:
            started = time.monotonic()
            self._version = self.store.version
            self._comparison = compare_store(self.store)
            self._next = time.monotonic() + COST_SHARE * (time.monotonic() - started)
        return self._comparison

    def follow(self) -> None:
        """At each tick while the tab shows: redraw if the store moved."""
        if self._version != self.store.version and time.monotonic() >= self._next:
            self.refresh(layout=True)

    def _tasks(self) -> list[Task]:
        return list(self.comparison.tasks)

    def render(self) -> RenderableType:
        comparison = self.comparison
        if not comparison.tasks:
            shown: RenderableType = Text("no finished rollouts yet: the comparison fills in as they end", style=self.palette.muted)
        else:
            shown = comparison_table(comparison, self.palette, self.cursor_task if self.has_focus else None, self.content_region.width)
        if (partial := self.store.partial) is None:
            return shown
        return Group(Text(f"partial: {safe(partial)}; the comparison fills in as it reads", style=self.palette.warning), shown)

    def on_focus(self) -> None:
        if self.cursor_task is None:
            self.cursor_task = next(iter(self._tasks()), None)
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def _move_to(self, tasks: list[Task], index: int) -> None:
        if not tasks:
            return
        index = max(0, min(index, len(tasks) - 1))
        self.cursor_task = tasks[index]
        self.refresh()
        if isinstance(container := self.parent, Widget):  # the tab's scroll keeps the cursor in view
            row = self.virtual_region.y + HEADER_ROWS + index
            container.scroll_to_region(Region(0, row, 1, 1), animate=False, immediate=True)

    def action_cursor(self, step: int) -> None:
        tasks = self._tasks()
        at = tasks.index(self.cursor_task) if self.cursor_task in tasks else -1
        self._move_to(tasks, at + step if at >= 0 else 0)

    def action_first(self) -> None:
        self._move_to(self._tasks(), 0)

    def action_last(self) -> None:
        tasks = self._tasks()
        self._move_to(tasks, len(tasks) - 1)

    def action_choose(self) -> None:
        if self.cursor_task is not None and self.cursor_task in self._tasks():
            self.post_message(self.TaskChosen(self.cursor_task))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        tasks = self._tasks()
        if offset is None or not 0 <= offset.y - HEADER_ROWS < len(tasks):
            return
        self.focus()
        self._move_to(tasks, offset.y - HEADER_ROWS)
        self.action_choose()
