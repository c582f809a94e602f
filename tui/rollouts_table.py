"""Every rollout of every variant, one keyed row each.

The app's tick hands over the keys the store says changed; only cells whose value
changed are written (`update_cell`), so a tick costs the same at 100 rows and 5,000.
Elapsed and activity tick once a second for the running rows on screen. Only a new
filter or a theme change rebuilds the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from core.session.store import PHASES, Rollout, RolloutStore, Status
from tui.format import Palette, clock, reward_text, safe
from tui.rollout_filter import RowFilter

COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("variant", "Variant", 10),
    ("task", "Task", 24),
    ("phase", "Phase", 10),
    ("activity", "Activity", 16),
    ("turns", "Turns", 5),
    ("tokens", "Tokens", 7),
    ("reward", "Reward", 6),
    ("elapsed", "Elapsed", 7),
    ("errors", "Errors", 6),
    ("trace", "Trace", 9),
)
"""What a glance needs first (what runs, where it is, what it does now) on the left, so
an 80-column terminal shows it without scrolling; the trace id, a cross-reference, last."""
COLUMN_KEYS = tuple(key for key, _, _ in COLUMNS)
NARROW = 110
"""Below this width the Task column gives up its extra width (`TASK_NARROW`)."""
TASK_NARROW = 12
TICKING = ("elapsed", "activity")
ROWS_PER_TICK = 500
"""A burst touching more rows than this is spread over the next ticks, so a tick never
holds the loop long enough to delay a key press."""

_PHASE_ORDER = {p: i for i, p in enumerate(("queued", "starting", *PHASES, "done", "error"))}

Cell = tuple[str, Style]


class KeyCell(Text):
    """The first cell of a row; it carries its rollout key so `DataTable.sort` can
    sort by live store values rather than by what the cells show."""

    def __init__(self, text: str, style: Style, key: str) -> None:
        super().__init__(text, style=style, no_wrap=True, overflow="ellipsis", end="")
        self.rollout_key = key


def _cell(text: str, style: Style) -> Text:
    """A cell too narrow for its text ends in "…", so a cut name reads as cut."""
    return Text(text, style=style, no_wrap=True, overflow="ellipsis", end="")


def sort_value(column: str, rollout: Rollout, now: float) -> Any:
    match column:
        case "variant":
            return rollout.variant
        case "task":
            return rollout.task_label.lower()
        case "trace":
            return next(iter(rollout.traces), "")
        case "phase":
            return _PHASE_ORDER.get(rollout.phase, len(_PHASE_ORDER))
        case "reward":
            return (rollout.reward is not None, rollout.reward or 0.0)
        case "elapsed":
            return rollout.elapsed(now)
        case "activity":
            return rollout.activity(now)[1]
        case _:
            return getattr(rollout, column)


class RolloutsTable(DataTable):
    BINDINGS = [
        Binding("o", "cycle_sort", "Sort", show=False, tooltip="Sort by the next column"),
        Binding("O", "reverse_sort", "Reverse sort", show=False),
    ]

    def __init__(self, store: RolloutStore, clock_fn: Callable[[], float], **kwargs: Any) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self.store = store
        self.now = clock_fn
        self.row_filter = RowFilter()
        self.sort_column: str | None = None
        self.sort_reverse = False
        self.palette: Palette
        self._shown: dict[str, dict[str, Cell]] = {}
        self._dirty: dict[str, None] = {}
        self._resort = False
        self._narrow = False

    def on_mount(self) -> None:
        self._add_columns()
        self.palette = Palette(self.app)

    def _add_columns(self) -> None:
        for key, _label, width in COLUMNS:
            if key == "task" and self._narrow:
                width = TASK_NARROW
            self.add_column(self._header(key), width=width, key=key)

    def on_resize(self) -> None:
        """Crossing `NARROW` re-lays the columns (rare: a terminal resize), never a tick."""
        narrow = self.size.width < NARROW
        if narrow != self._narrow:
            self._narrow = narrow
            selected = self.selected_key
            self.clear(columns=True)
            self._add_columns()
            self.rebuild()
            if selected is not None:
                self.select(selected)

    @property
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def select(self, key: str) -> None:
        if key in self._shown:
            self.move_cursor(row=self.get_row_index(key))

    def set_palette(self, palette: Palette) -> None:
        self.palette = palette
        self.rebuild()

    def set_filter(self, row_filter: RowFilter) -> None:
        if row_filter != self.row_filter:
            self.row_filter = row_filter
            self.rebuild()

    def rebuild(self) -> None:
        """Every row from scratch: once per filter or theme change, never per delta."""
        selected = self.selected_key
        self.clear()
        self._shown.clear()
        self._dirty.clear()
        now = self.now()
        for rollout in self.store.rollouts.values():
            if self._wanted(rollout, now):
                self._add(rollout, now)
        self._apply_sort()
        if selected is not None:
            self.select(selected)

    def mark(self, keys: Iterable[str]) -> None:
        """Rollouts whose rows the next `sync` redraws."""
        self._dirty.update(dict.fromkeys(keys))

    def sync(self, keys: Iterable[str] = ()) -> None:
        """Redraw the rows of changed rollouts, at most `ROWS_PER_TICK` of them now."""
        self.mark(keys)
        if not self._dirty:
            return
        now = self.now()
        batch = list(self._dirty)[:ROWS_PER_TICK]
        for key in batch:
            del self._dirty[key]
            rollout = self.store.rollouts.get(key)
            shown = key in self._shown
            if rollout is None or not self._wanted(rollout, now):
                if shown:
                    self.remove_row(key)
                    del self._shown[key]
            elif shown:
                self._update(rollout, now, COLUMN_KEYS)
            else:
                self._add(rollout, now)
                self._resort = self.sort_column is not None

    def tick(self) -> None:
        """Once a second: advance elapsed/activity on the running rows on screen, and
        re-sort if sorted values changed since (never more often, so rows hold still)."""
        if self._resort:
            self._resort = False
            self._apply_sort()
        if not self.row_count:
            return
        now = self.now()
        first = int(self.scroll_y)
        for row in self.ordered_rows[first : first + self.size.height]:
            rollout = self.store.rollouts.get(row.key.value)
            if rollout is not None and not rollout.status.finished:
                self._update(rollout, now, TICKING)

    def sort_by(self, column: str, reverse: bool | None = None) -> None:
        if reverse is None:
            reverse = not self.sort_reverse if column == self.sort_column else False
        previous, self.sort_column, self.sort_reverse = self.sort_column, column, reverse
        for key in {previous, column} - {None}:
            self.columns[key].label = self._header(key)
        self._apply_sort()

    def action_cycle_sort(self) -> None:
        index = COLUMN_KEYS.index(self.sort_column) + 1 if self.sort_column else 0
        self.sort_by(COLUMN_KEYS[index % len(COLUMN_KEYS)], reverse=False)

    def action_reverse_sort(self) -> None:
        self.sort_by(self.sort_column or COLUMN_KEYS[0], reverse=not self.sort_reverse)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(event.column_key.value)

    def _header(self, column: str) -> Text:
        label = next(label for key, label, _ in COLUMNS if key == column)
        if column == self.sort_column:
            label += " ▼" if self.sort_reverse else " ▲"
        return Text(label)

    def _apply_sort(self) -> None:
        if self.sort_column is None or not self.row_count:
            return
        selected, column, now = self.selected_key, self.sort_column, self.now()
        rollouts = self.store.rollouts
        self.sort(
            "variant",
            key=lambda cell: sort_value(column, rollouts[cell.rollout_key], now),
            reverse=self.sort_reverse,
        )
        if selected is not None:
            self.select(selected)

    def _wanted(self, rollout: Rollout, now: float) -> bool:
        return not self.row_filter or self.row_filter.matches(rollout, now, self.store.stall_seconds)

    def _add(self, rollout: Rollout, now: float) -> None:
        cells = self._cells(rollout, now, COLUMN_KEYS)
        self._shown[rollout.key] = cells
        first, *rest = (cells[key] for key in COLUMN_KEYS)
        self.add_row(
            KeyCell(*first, rollout.key),
            *(_cell(text, style) for text, style in rest),
            key=rollout.key,
        )

    def _update(self, rollout: Rollout, now: float, columns: tuple[str, ...]) -> None:
        shown = self._shown[rollout.key]
        for column, cell in self._cells(rollout, now, columns).items():
            if shown[column] != cell:
                shown[column] = cell
                if column == self.sort_column:
                    self._resort = True
                value = KeyCell(*cell, rollout.key) if column == "variant" else _cell(*cell)
                self.update_cell(rollout.key, column, value)

    def _cells(self, rollout: Rollout, now: float, columns: tuple[str, ...]) -> dict[str, Cell]:
        palette = self.palette
        plain = Style()
        cells: dict[str, Cell] = {}
        for column in columns:
            match column:
                case "variant":
                    cells[column] = (safe(rollout.variant), plain)
                case "task":
                    cells[column] = (safe(rollout.task_label), plain)
                case "trace":
                    ids = list(rollout.traces)
                    # "+N" more traces must fit the column: a shorter id makes room for it
                    text = (ids[0][:8] if len(ids) == 1 else f"{ids[0][:6]} +{len(ids) - 1}") if ids else ""
                    cells[column] = (safe(text), palette.muted)
                case "phase":
                    cells[column] = (rollout.phase, palette.phase(rollout.phase))
                case "turns":
                    cells[column] = (str(rollout.turns), plain)
                case "tokens":
                    cells[column] = (f"{rollout.tokens:,}", plain)
                case "reward":
                    cells[column] = (reward_text(rollout.reward), plain)
                case "elapsed":
                    cells[column] = (clock(rollout.elapsed(now)) if rollout.started_at else "", plain)
                case "activity":
                    cells[column] = self._activity(rollout, now, palette)
                case "errors":
                    errors = rollout.errors
                    cells[column] = (str(errors) if errors else "", palette.error if errors else plain)
        return cells

    def _activity(self, rollout: Rollout, now: float, palette: Palette) -> Cell:
        label, seconds = rollout.activity(now)
        if rollout.status.finished or rollout.status is Status.QUEUED:
            return label, palette.muted
        text = f"{label} {clock(seconds)}"
        if rollout.stalled(now, self.store.stall_seconds):
            return f"⚠ stalled {text}", palette.warning + Style(reverse=True)
        return text, palette.phase("agent") if label == "generating" else Style()
