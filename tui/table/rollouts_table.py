"""Every rollout of every variant, one row each, drawn from the store on demand.

The table holds an index, not cells: the keys of the rollouts its filter lets through,
in sort order. Building it (a filter keystroke, a sort, the first draw of 5,000 rows)
is one pass of plain Python over the store with the filter compiled once, over the
rows shown when the keystroke only narrows the filter, or none when the new filter
lets the same rollouts through (`RowFilter.same_rows`); drawing reads the store for the rows on
screen only, through the Line API (`render_line`) and a per-row strip cache, so a tick
costs the rows that changed and are visible, however many rows there are. The cursor
belongs to a rollout key: rows inserted, sorted or filtered around it leave the same
rollout selected.

A session that keeps its finished rows as columns (`StoreView.finished_rows`, a followed
prime-rl run's million episodes) has them indexed apart (`FinishedIndex`: numpy row
numbers, filtered by a mask and sorted over the columns, drawn from the arrays), the
rollouts merged in among them; every other session's index is its rollouts' keys alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events, work
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tracewatch.core.session.contracts import StoreView
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.tui.chrome.keys import bindings
from tracewatch.tui.drawing.literal import fit
from tracewatch.tui.drawing.palette import PALETTE_CLASSES, Palette
from tracewatch.tui.drawing.virtual_size import set_virtual_size
from tracewatch.tui.table.columns import BY_KEY, COLUMNS, FINISHED_CELLS, Cell, Column

if TYPE_CHECKING:
    from tracewatch.tui.table.finished_index import FinishedIndex, Keys, Places, Rows

Entry = str | int
"""What a table row shows: a rollout (its key) or a finished row kept as columns (its number)."""

COLUMN_KEYS = tuple(column.key for column in COLUMNS)
PADDING = 1
"""Blank cells each side of a column's text."""
TASK_NARROW = 12
ACTIVITY_GROWS = 14
"""A table wider than its columns gives the room to Activity ("⚠ 1:35 generating",
then what it waits on) up to this many cells, then the rest to Task: no cell is cut
with blank columns beside it."""
TICKING = frozenset(column.key for column in COLUMNS if column.ticks)
PASS_CHUNK = 2000
"""Rollouts a filter's pass weighs between two frames: a keystroke that is neither a
narrowing nor the same rows weighs every rollout, and done at once the field would not
echo the key until the pass over 20,000 rows ended (docs/performance.md)."""

REST_AFTER = 0.2
"""Seconds a big sort's first screen stands before the rest of its rows are sorted off
the loop: keys pressed in a row (`s` cycling the columns) start no sort of a million
rows that the next key throws away, each taking a core beside the loop."""


class _Pass:
    """A filter's pass under way, a chunk a frame: the rows it kept so far, where it
    reads next, and the rollouts that changed meanwhile (weighed again at its end)."""

    def __init__(self, row_filter: RowFilter, keys: list[str], sort: bool, done: Callable[[], None]) -> None:
        self.row_filter = row_filter
        self.keys = keys
        self.sort = sort
        self.done = done
        self.kept: list[str] = []
        self.at = 0
        self.changed: dict[str, None] = {}


VARIANT_WIDEST = 20
"""A training run's Variant column grows to its longest name (`train:gsm8k`) up to this."""


def available(steps: bool, names: Iterable[str] = ()) -> tuple[Column, ...]:
    """The columns a session can fill: the Step column only where a rollout has a step.
    There (a training run, whose variants are `kind:env`) the Variant column is as wide
    as its longest variant name, up to `VARIANT_WIDEST`."""
    if not steps:
        return tuple(column for column in COLUMNS if not column.stepped)
    variant = BY_KEY["variant"]
    width = min(VARIANT_WIDEST, max([variant.width, *map(len, names)]))
    return tuple(replace(column, width=width) if column is variant else column for column in COLUMNS)


def full_width(columns: tuple[Column, ...]) -> int:
    """Narrower than this, the table lays its columns out by priority: a one-cell gap
    between columns, the Task column as wide as what is left (at least `TASK_NARROW`),
    and the columns that do not fit left out rather than behind a horizontal scrollbar."""
    return sum(column.width + 2 * PADDING for column in columns)


class _RowMessage(Message):
    """A message about one row of a `RolloutsTable` (its `control`)."""

    def __init__(self, table: RolloutsTable, key: str | None) -> None:
        super().__init__()
        self.table = table
        self.key = key

    @property
    def control(self) -> RolloutsTable:
        return self.table


class RolloutsTable(ScrollView, can_focus=True):
    """The rollouts table. The app's tick calls `mark`/`sync` with the keys the store
    says changed and `tick` once a second; the filter and sort rebuild the index."""

    DEFAULT_CSS = """
    RolloutsTable {
        background: $surface;
        color: $foreground;
        & > .rollouts-table--header { text-style: bold; background: $panel; color: $foreground; }
        & > .rollouts-table--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
        &:blur > .rollouts-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """
    COMPONENT_CLASSES = {"rollouts-table--header", "rollouts-table--cursor", *PALETTE_CLASSES}

    BINDINGS = bindings("table")

    class RowHighlighted(_RowMessage):
        """The cursor is on another rollout (or on none: `key` is None)."""

    class RowSelected(_RowMessage):
        """Enter, or a click on the row the cursor is on."""

        key: str

    def __init__(
        self, store: StoreView, clock_fn: Callable[[], float], *, user_busy: Callable[[], None] = lambda: None, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.store = store
        self.now = clock_fn
        self.user_busy = user_busy
        """Told at each filter or sort key: the session's background work that can wait, waits."""
        self.row_filter = RowFilter()
        self.sort_column: str | None = None
        self.sort_reverse = False
        self.palette: Palette
        self._keys: list[str] = []
        """The index: shown rollouts' keys in display order."""
        self._rows: dict[str, int] = {}
        """Key -> position in `_keys`."""
        self._finished: FinishedIndex | None = None
        """The finished rows shown, where the session keeps some as columns."""
        if store.finished_rows is not None:
            from tracewatch.tui.table.finished_index import FinishedIndex  # numpy: only for a session that has columns

            self._finished = FinishedIndex(store.finished_rows)
        self._rest_for = -1
        """The big sort (`FinishedIndex.generation`) whose rest is timed to start: one
        timer a sort, however many ticks meet it pending."""
        self._dirty: dict[str, None] = {}
        self._resort = False
        self._cursor_row = 0
        self._cursor_key: str | None = None
        self._steps = store.steps_known
        self._columns, self._widths, self._pads = self._layout(full_width(available(self._steps, store.variants)), self._steps, store.variants)
        self._strips: dict[Entry, tuple[Strip, int]] = {}
        """Each drawn row without the cursor, full width, and the `_second` it was drawn
        in; dropped when its rollout changes, and a live row's (its clocks move) drawn
        again after the next `tick`. Kept through filter changes: the rows a cleared
        filter brings back are mostly drawn already."""
        self._second = 0
        """How many `tick`s so far."""
        self._styles: dict[tuple[Style, str | None], Style] = {}
        self._base_style: Style | None = None
        self.rows_drawn = 0
        """How many rows were drawn from the store (to check a tick costs what changed)."""
        self.pass_chunk = PASS_CHUNK
        self._pass: _Pass | None = None
        """The filter being applied, while its pass runs: `row_filter` is the one shown."""

    # -- what the app and tests read ---------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self._keys) + (len(self._finished) if self._finished is not None else 0)

    @property
    def finished_index(self) -> FinishedIndex | None:
        """The index over the finished rows kept as columns, where the session keeps some."""
        return self._finished

    @property
    def ordered_keys(self) -> list[str]:
        """The shown rollouts, top to bottom (do not change it)."""
        if self._finished is None:
            return self._keys
        return [self._key_of(self._entry(position)) for position in range(self.row_count)]

    @property
    def cursor_row(self) -> int:
        return self._cursor_row

    @property
    def selected_key(self) -> str | None:
        """The rollout the cursor belongs to; while `pinned`, one no row shows."""
        return self._cursor_key if self.pinned else self._key_of(self._entry(self._cursor_row)) if self.row_count else None

    @property
    def pinned(self) -> bool:
        """The selected rollout left the view (the filter no longer lets it through):
        the cursor stays with it, on no row, until the user moves it."""
        key = self._cursor_key
        if key is None or self._finished is None:
            return key is not None and key not in self._rows and key in self.store.rollouts
        return self._position(key) is None and (key in self.store.rollouts or self._finished.source.row_of(key) is not None)

    def get_row_index(self, key: str) -> int:
        position = self._position(key)
        if position is None:
            raise KeyError(key)
        return position

    def cell_text(self, key: str, column: str) -> str:
        """The text the row of `key` draws in `column` now, before it is fitted to the
        column's width."""
        rollout = self.store.rollouts.get(key)
        if rollout is None and self._finished is not None and (row := self._finished.source.row_of(key)) is not None:
            return FINISHED_CELLS[column](self._finished.source, row, self.palette)[0]
        return self._cells(self.store.rollouts[key], self.now(), (column,))[column][0]

    def header_label(self, column: str) -> str:
        """A column's header as drawn: its label, and in the sorted column the order's
        arrow (▲ ascending, ▼ reversed) in the cell after it, so no width cuts it."""
        label = BY_KEY[column].header
        left, right = (" " * pad for pad in self._pads)
        width = self._widths[self._columns.index(column)] - len(left) - len(right)
        if column != self.sort_column:
            return left + fit(label, width) + right
        text = fit(label, width).rstrip()
        return left + text + ("▼" if self.sort_reverse else "▲") + " " * (width + len(right) - 1 - cell_len(text))

    @property
    def columns_shown(self) -> tuple[str, ...]:
        """The columns on screen, left to right (a narrow table leaves some out)."""
        return self._columns

    # -- the app's API -------------------------------------------------------------------

    def on_mount(self) -> None:
        self.palette = Palette(self)

    def select(self, key: str) -> None:
        if (position := self._position(key)) is not None:
            self._move_cursor(position)

    def set_palette(self, palette: Palette) -> None:
        self.palette = palette
        self._forget_drawing()

    @property
    def filtering(self) -> bool:
        """A filter's pass is under way: the rows shown are still the last filter's."""
        return self._pass is not None

    def set_filter(self, row_filter: RowFilter, done: Callable[[], None] = lambda: None) -> None:
        """A filter the user typed moves the cursor onto a row it shows, so `c` and `x`
        act on what is in view; only a rollout that leaves the view by itself (it
        finished, say) keeps the cursor (`pinned`). A pass over more rollouts than a
        chunk runs a chunk a frame, the last filter's rows shown meanwhile, so the key
        reaches the screen first; `done` is called once the rows are the new filter's.
        A key typed during a pass drops it and starts its own."""
        self.user_busy()
        if self._pass is not None:
            self._pass = None
        elif row_filter == self.row_filter:
            done()
            return
        shown = self.row_filter
        if row_filter.same_rows(shown, self.store.variants):
            self.row_filter = row_filter  # the rows shown are the answer; rollouts changed since are still marked
        elif not row_filter:
            self.row_filter = row_filter
            self.rebuild()
        else:
            narrows = row_filter.narrows(shown)
            keys = list(self._keys if narrows else self.store.rollouts)
            self._pass = _Pass(row_filter, keys, sort=not narrows, done=done)
            if len(keys) > self.pass_chunk:
                self.call_after_refresh(self._weigh, self._pass)  # the key's echo first
            else:
                self._weigh(self._pass)
            return
        self._filtered()
        done()

    def _weigh(self, work: _Pass) -> None:
        """A chunk of the pass, then the next after the screen's next frame; at its end
        the kept rows become the index, and those that changed meanwhile are weighed
        against the new filter."""
        if work is not self._pass:
            return  # dropped by a later key
        wanted, rollouts = work.row_filter.matcher(self.now(), self.store.is_stalled), self.store.rollouts
        stop = min(len(work.keys), work.at + self.pass_chunk)
        work.kept.extend(key for key in work.keys[work.at : stop] if (rollout := rollouts.get(key)) is not None and wanted(rollout))
        work.at = stop
        if stop < len(work.keys):
            self.call_after_refresh(self._weigh, work)
            return
        self._pass = None
        self.row_filter = work.row_filter
        self._weigh_finished()
        if work.sort:
            for key in self._dirty:
                self._strips.pop(key, None)
            self._dirty.clear()
        self._keys = work.kept
        self._reindex(sort=work.sort)
        self.sync(work.changed)
        self._filtered()
        work.done()

    def _filtered(self) -> None:
        if self.pinned:
            self._move_cursor(self._cursor_row)

    def rebuild(self) -> None:
        """The index from scratch, one pass over the store: a filter change or the
        first draw, never a delta."""
        for key in self._dirty:
            self._strips.pop(key, None)
        self._dirty.clear()
        rollouts = self.store.rollouts
        if self.row_filter:
            wanted = self._wanted()
            self._keys = [key for key, rollout in rollouts.items() if wanted(rollout)]
        else:
            self._keys = list(rollouts)
        self._weigh_finished()
        self._reindex(sort=True)

    def mark(self, keys: Iterable[str]) -> None:
        """Rollouts whose rows the next `sync` redraws."""
        self._dirty.update(dict.fromkeys(keys))

    def sync(self, keys: Iterable[str] = ()) -> None:
        """Bring the changed rollouts' rows up to date: rows join or leave the index
        as the filter says; only the changed rows on screen are repainted (a whole
        repaint also redraws every unchanged row and the scrollbar)."""
        self.mark(keys)
        finished = self._finished
        moved = finished is not None and finished.version != finished.source.version and self._pass is None
        if not self._dirty and not moved:
            return
        if moved:
            self._weigh_finished(changed_only=True)
        if self._pass is not None:
            self._pass.changed.update(self._dirty)
        if self.store.steps_known != self._steps:  # the first rollout with a step: its column joins
            self._fit_columns()
        wanted = self._wanted()
        rollouts, rows, strips = self.store.rollouts, self._rows, self._strips
        redraw: list[int] = []
        gone: set[str] = set()
        added: list[str] = []
        for key in self._dirty:
            rollout = rollouts.get(key)
            shown = key in rows
            strips.pop(key, None)  # shown or not: a filter may bring it back
            if rollout is None or not wanted(rollout):
                if shown:
                    gone.add(key)
            elif shown:
                redraw.append(rows[key])
                self._resort = self._resort or self.sort_column is not None
            else:
                added.append(key)
        self._dirty.clear()
        if gone:
            self._keys = [key for key in self._keys if key not in gone]
        if added:
            self._keys.extend(added)
            self._resort = self._resort or self.sort_column is not None
        if gone or added or moved:
            self._reindex(sort=False)
        elif redraw:
            self._repaint_rows(redraw if finished is None else [finished.live_position(index) for index in redraw])

    def tick(self) -> None:
        """Once a second: advance elapsed/activity on the running rows on screen, and
        re-sort if sorted values changed since (never more often, so rows hold still)."""
        self._second += 1
        if self.row_filter.moves_with_time:  # rows cross its line with no delta (a stall, the elapsed time)
            self.rebuild()
        rollouts = self.store.rollouts
        running = any((rollout := rollouts.get(key)) is not None and not rollout.status.finished for key in self._visible_keys())
        if self.sort_column in TICKING and running:
            self._resort = True
        if self._resort:
            self._resort = False
            self._reindex(sort=True)
        elif running:
            self.refresh()

    def sort_by(self, column: str, reverse: bool | None = None) -> None:
        self.user_busy()  # a followed run's reading of steps would move rows under the kept keys
        if reverse is None:
            reverse = not self.sort_reverse if column == self.sort_column else False
        self.sort_column, self.sort_reverse = column, reverse
        self._weigh_finished()
        self._reindex(sort=True)

    def action_cycle_sort(self) -> None:
        keys = tuple(column.key for column in available(self._steps))
        index = keys.index(self.sort_column) + 1 if self.sort_column in keys else 0
        self.sort_by(keys[index % len(keys)], reverse=False)

    def action_reverse_sort(self) -> None:
        self.sort_by(self.sort_column or COLUMN_KEYS[0], reverse=not self.sort_reverse)

    # -- the index and the cursor ----------------------------------------------------------

    def _wanted(self) -> Callable[[Rollout], bool]:
        """The filter's test for a rollout at this moment."""
        return self.row_filter.matcher(self.now(), self.store.is_stalled)

    def _weigh_finished(self, changed_only: bool = False) -> None:
        """The finished rows weighed against the filter and sorted again (those that
        changed since the last look, with `changed_only`)."""
        finished = self._finished
        if finished is None:
            return
        rollouts = self.store.rollouts
        live = [rollouts[key] for key in self._keys if key in rollouts]
        weigh = finished.update if changed_only else finished.build
        weigh(self.row_filter, self.sort_column, self.sort_reverse, self.now(), live)
        drawn = [entry for entry in self._strips if isinstance(entry, int)]
        for row in finished.changed_of(drawn):  # a step or an annotation learnt: those rows are drawn again
            del self._strips[row]
        if finished.pending is not None and finished.generation != self._rest_for:  # a big sort: the rest of its rows follow
            self._rest_for = finished.generation
            self.set_timer(REST_AFTER, lambda generation=finished.generation: self._start_rest(generation))

    def _start_rest(self, generation: int) -> None:
        finished = self._finished
        if finished is not None and finished.pending is not None and finished.generation == generation:
            self._sort_rest(generation, *finished.pending)

    @work(thread=True, exclusive=True, group="finished-sort", exit_on_error=False)
    def _sort_rest(self, generation: int, rows: Rows, keys: Keys, reverse: bool, count: int) -> None:
        """A big sort's every row and their places, off the loop (numpy's sort lets go
        of the GIL): the loop only takes the result."""
        from tracewatch.tui.table.finished_index import full_order

        done = full_order(rows, keys, reverse, count)
        if self.app.is_running:
            self.app.call_from_thread(self._rest_sorted, generation, done)

    def _rest_sorted(self, generation: int, done: tuple[Rows, Keys, Places]) -> None:
        if self._finished is not None and self._finished.sorted(generation, done):
            self._reindex(sort=False)

    def _reindex(self, sort: bool) -> None:
        """After the index changed: sort it if asked, find every key's row again, keep
        the cursor on its rollout (or, when that one left, at its place)."""
        finished = self._finished
        if finished is not None:  # the rollouts in the finished rows' order, merged in among them
            rollouts = self.store.rollouts
            live = [rollouts[key] for key in self._keys]
            keys = finished.live_keys(self.sort_column, self.sort_reverse, self.now(), live)
            order = sorted(range(len(self._keys)), key=keys.__getitem__)
            self._keys = [self._keys[index] for index in order]
            finished.merge([keys[index] for index in order])
        elif sort and self.sort_column is not None:
            value, now, rollouts = BY_KEY[self.sort_column].sort, self.now(), self.store.rollouts
            self._keys.sort(key=lambda key: value(rollouts[key], now), reverse=self.sort_reverse)
        self._rows = {key: row for row, key in enumerate(self._keys)}
        set_virtual_size(self, Size(sum(self._widths), self.row_count + 1))
        row = self._position(self._cursor_key) if self._cursor_key is not None else None
        if row is None and self.pinned:
            self._cursor_row = max(0, min(self._cursor_row, self.row_count - 1))
        else:
            self._move_cursor(self._cursor_row if row is None else row)
        self.refresh()

    def _position(self, key: str) -> int | None:
        """Where the row of `key` is shown (None: it is not)."""
        index = self._rows.get(key)
        finished = self._finished
        if finished is None:
            return index
        if index is not None:
            return finished.live_position(index)
        row = finished.source.row_of(key)
        return None if row is None else finished.row_position(row)

    def _entry(self, position: int) -> Entry:
        finished = self._finished
        if finished is None:
            return self._keys[position]
        live, index = finished.entry(position)
        return self._keys[index] if live else index

    def _key_of(self, entry: Entry) -> str:
        if isinstance(entry, str):
            return entry
        assert self._finished is not None
        return self._finished.source.key(entry)

    def _move_cursor(self, row: int) -> None:
        """A move that does not scroll repaints the cursor's old and new lines only."""
        old, top = self._cursor_row, int(self.scroll_y)
        self._cursor_row = max(0, min(row, self.row_count - 1))
        key = self._key_of(self._entry(self._cursor_row)) if self.row_count else None
        if key != self._cursor_key:
            self._cursor_key = key
            self.post_message(self.RowHighlighted(self, key))
        self._scroll_to_cursor()
        if int(self.scroll_y) == top:
            self._repaint_rows((old, self._cursor_row))
        else:
            self.refresh()

    def _repaint_rows(self, rows: Iterable[int]) -> None:
        """Repaint these rows' lines where they are on screen, not the whole table: a
        whole repaint renders every line on screen and the scrollbar again."""
        top, height, width = int(self.scroll_y), self._body_height(), self.size.width
        lines = [Region(0, row - top + 1, width, 1) for row in rows if 0 <= row - top < height]  # under the header
        if lines:
            self.refresh(*lines)

    def _scroll_to_cursor(self) -> None:
        if not self.is_mounted:
            return
        height = self._body_height()
        top = int(self.scroll_y)
        if self._cursor_row < top:
            self.scroll_to(y=self._cursor_row, animate=False, immediate=True)
        elif height > 0 and self._cursor_row >= top + height:
            self.scroll_to(y=self._cursor_row - height + 1, animate=False, immediate=True)

    def _body_height(self) -> int:
        """Rows that fit under the header."""
        return max(0, self.scrollable_content_region.height - 1)

    def _visible_keys(self) -> list[str]:
        """The rollouts on screen (not the finished rows: nothing of theirs moves)."""
        top = int(self.scroll_y)
        if self._finished is None:
            return self._keys[top : top + self._body_height()]
        entries = (self._entry(position) for position in range(top, min(self.row_count, top + self._body_height())))
        return [entry for entry in entries if isinstance(entry, str)]

    # -- keys and mouse ------------------------------------------------------------------

    def action_cursor(self, step: int) -> None:
        """From a pinned cursor, down is the row now in its place and up the one above."""
        if self.pinned:
            step = min(step, 0) if step < 0 else 0
        self._move_cursor(self._cursor_row + step)

    def action_page(self, step: int) -> None:
        self._move_cursor(self._cursor_row + step * max(1, self._body_height()))

    def action_first(self) -> None:
        self._move_cursor(0)

    def action_last(self) -> None:
        self._move_cursor(self.row_count - 1)

    def action_select_cursor(self) -> None:
        if (key := self.selected_key) is not None:
            self.post_message(self.RowSelected(self, key))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:
            column = self._column_at(offset.x + int(self.scroll_x))
            if column is not None:
                self.sort_by(column)
            return
        row = int(self.scroll_y) + offset.y - 1
        if row < self.row_count:
            if row == self._cursor_row:
                self.action_select_cursor()
            else:
                self._move_cursor(row)

    def _column_at(self, x: int) -> str | None:
        for key, width in zip(self._columns, self._widths, strict=True):
            if x < width:
                return key
            x -= width
        return None

    # -- drawing ---------------------------------------------------------------------------

    def on_resize(self) -> None:
        """A resize re-lays the columns (rare), never a tick."""
        self._fit_columns()
        self._scroll_to_cursor()

    def render_lines(self, crop: Region) -> list[Strip]:
        """The columns fitted first: the first frame is painted before the table hears
        of its size, and drew the columns of a full-width table."""
        self._fit_columns()
        return super().render_lines(crop)

    def _fit_columns(self) -> None:
        width = self.scrollable_content_region.width
        if not width:
            return
        self._steps = self.store.steps_known
        layout = self._layout(width, self._steps, self.store.variants)
        if layout != (self._columns, self._widths, self._pads):
            self._columns, self._widths, self._pads = layout
            set_virtual_size(self, Size(sum(self._widths), self.row_count + 1))
            self._forget_drawing()

    @staticmethod
    def _layout(width: int, steps: bool, names: Iterable[str]) -> tuple[tuple[str, ...], list[int], tuple[int, int]]:
        """The columns shown, each one's width on screen (its padding included), and
        the padding (left, right): every available column from their `full_width` up
        (the room over it to Activity and Task), else by priority."""
        candidates = available(steps, names)
        if (spare := width - full_width(candidates)) >= 0:
            widths = {column.key: column.width + 2 * PADDING for column in candidates}
            widths["activity"] += (grown := min(spare, ACTIVITY_GROWS))
            widths["task"] += spare - grown
            return tuple(widths), list(widths.values()), (PADDING, PADDING)
        wanted = {column.key: (TASK_NARROW if column.key == "task" else column.width) + 1 for column in candidates}
        chosen: set[str] = set()
        used = 0
        for column in sorted(candidates, key=lambda column: column.priority):
            if used + wanted[column.key] <= width:
                chosen.add(column.key)
                used += wanted[column.key]
        if "task" in chosen:
            wanted["task"] += min(width - used, 24 - TASK_NARROW)
        columns = tuple(column.key for column in candidates if column.key in chosen)
        return columns, [wanted[key] for key in columns], (0, 1)

    def notify_style_update(self) -> None:
        """A theme or CSS change: styles are resolved again, rows redrawn."""
        super().notify_style_update()
        self._forget_drawing()

    def _forget_drawing(self) -> None:
        self._styles.clear()
        self._strips.clear()
        self._base_style = None
        self.refresh()

    def _base(self) -> Style:
        """The widget's own style, as `rich_style` gives it: that walks every ancestor's
        styles, and every line drawn asked for it (docs/performance.md)."""
        if self._base_style is None:
            self._base_style = self.rich_style
        return self._base_style

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        x = int(self.scroll_x)
        if y == 0:
            strip = self._header_strip()
        else:
            row = int(self.scroll_y) + y - 1
            if row >= self.row_count:
                return Strip.blank(width, self._base())
            entry = self._entry(row)
            if row == self._cursor_row and self._key_of(entry) == self._cursor_key:
                strip = self._row_strip(entry, "cursor")
            else:
                strip = self._kept_strip(entry)
        return strip.crop_extend(x, x + width, self._base())

    def _kept_strip(self, key: Entry) -> Strip:
        kept = self._strips.get(key)
        if kept is not None and (kept[1] == self._second or self._settled(key)):
            return kept[0]
        strip = self._row_strip(key, None)
        self._strips[key] = (strip, self._second)
        return strip

    def _settled(self, key: Entry) -> bool:
        """Nothing in its row moves with the clock (it finished, or is gone)."""
        if isinstance(key, int):
            return True
        rollout = self.store.rollouts.get(key)
        return rollout is None or rollout.status.finished

    def _header_strip(self) -> Strip:
        style = self._style(Style(), "header")
        texts = (self.header_label(key) for key in self._columns)
        return Strip([Segment("".join(texts), style)], sum(self._widths))

    def _row_strip(self, key: Entry, layer: str | None) -> Strip:
        if isinstance(key, int):
            assert self._finished is not None
            rows, palette = self._finished.source, self.palette
            cells = {column: FINISHED_CELLS[column](rows, key, palette) for column in self._columns}
        else:
            rollout = self.store.rollouts.get(key)
            if rollout is None:
                return Strip.blank(sum(self._widths), self._base())
            cells = self._cells(rollout, self.now(), self._columns)
        self.rows_drawn += 1
        left, right = (" " * pad for pad in self._pads)
        inner = len(left) + len(right)
        segments = [
            Segment(left + fit(text, width - inner) + right, self._style(style, layer))
            for (text, style), width in zip(cells.values(), self._widths, strict=True)
        ]
        return Strip(segments, sum(self._widths))

    def _style(self, cell: Style, layer: str | None) -> Style:
        """A cell's style over the widget's, under the cursor's or the header's."""
        cached = self._styles.get((cell, layer))
        if cached is None:
            cached = self._base() + cell
            if layer is not None:
                cached += self.get_component_rich_style(f"rollouts-table--{layer}")
            self._styles[(cell, layer)] = cached
        return cached

    def _cells(self, rollout: Rollout, now: float, columns: tuple[str, ...]) -> dict[str, Cell]:
        palette, stalled = self.palette, self.store.is_stalled
        return {key: BY_KEY[key].cell(rollout, now, palette, stalled) for key in columns}
