"""The table's index over a session's finished rows kept as columns
(`StoreView.finished_rows`): the rows its filter lets through in display order, as a numpy
array of row numbers, with the rollouts' rows merged in by position. A keystroke is a
mask over the columns (`finished_mask`) and a sort of the rows' keys, never a Python
object a row; a row is drawn from the arrays when it is on screen.

Display position p holds the live rollout i where `live_pos[i] == p`, else the
finished row `rows[p - (live rollouts before p)]`: the live rollouts sit among the
finished rows by their sort keys (on top when the table is not sorted).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tracewatch.core.session.contracts import FinishedRows
from tracewatch.core.session.finished_columns import RANKED, finished_mask, ranks_made, sort_keys
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.rollout_filter import RowFilter

Positions = npt.NDArray[np.int64]
Rows = npt.NDArray[np.int32]
"""Finished rows' numbers: 4 bytes a row shown."""
Keys = npt.NDArray[np.float64]
Places = npt.NDArray[np.int32]
LiveKey = tuple[float, float]
"""A live rollout's place: its sort key, then its finished row (infinity: none), as
rows of one key stand in row order; an opened row's rollout takes the row's place."""
FIRST_SCREEN = 1024
"""Rows a sort of many puts in order at once (`argpartition`): the rest waits for a
full sort off the loop (`full_order`), the first screen for none."""
PARTIAL_FROM = 65536
"""Shown rows from which a sort is done in those two steps."""
ONE_BY_ONE = 4096
"""Changed rows put back in their places one at a time, at most; more, and every row is sorted again."""
KEYS_KEPT = 4
"""Columns whose keys over every row are kept between sorts (8 bytes a row each): a
sort keystroke by one of them weighs only the rows changed since, not a million."""


class FinishedIndex:
    def __init__(self, rows: FinishedRows) -> None:
        self.source = rows
        self.rows: Rows = np.zeros(0, dtype=np.int32)
        """The finished rows shown, top to bottom."""
        self.live_pos: Positions = np.zeros(0, dtype=np.int64)
        """Each live rollout's display position (ascending), in the table's key order."""
        self.version = -1
        """The rows' `version` the index was built for."""
        self._place: Places | None = np.zeros(0, dtype=np.int32)
        """Per finished row, where it is in `rows` (-1: not shown): 4 bytes a row; None
        while a big sort is under way (its thread makes them)."""
        self._keys: Keys | None = None
        """The shown rows' sort keys, ascending (negated for a reversed sort); None when
        the table is not sorted, where a row's key is its number (`_shown_keys`)."""
        self.sorted_upto = 0
        """The rows in order so far (the rest of a big sort waits for `sorted`)."""
        self.generation = 0
        """Bumped at every change of the rows: a full sort of an older one is dropped."""
        self.pending: tuple[Rows, Keys, bool, int] | None = None
        """A big sort's rows, their keys, whether reversed and the rows' count then, for
        `full_order` to sort off the loop."""
        self._kept_keys: dict[str, tuple[int, object, Keys]] = {}
        """Per column sorted by lately: the rows' version, the ranks, and every row's
        key (not reversed), oldest first."""
        self.changed: Positions | None = np.zeros(0, dtype=np.int64)
        """The rows the last `update` found changed (None: it could not say, every row)."""
        self._shown_by: tuple[RowFilter, str | None, bool] | None = None
        """The filter and sort the rows shown were chosen and ordered by."""

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def nbytes(self) -> int:
        """The index's own arrays: its order, keys, places and the keys kept for sorts."""
        place = 0 if self._place is None else self._place.nbytes
        kept = sum(keys.nbytes for _, _, keys in self._kept_keys.values())
        keys = 0 if self._keys is None else self._keys.nbytes
        return self.rows.nbytes + keys + place + kept + self.live_pos.nbytes

    # -- building --------------------------------------------------------------------

    def build(self, row_filter: RowFilter, column: str | None, reverse: bool, now: float, live: Sequence[Rollout]) -> list[LiveKey]:
        """Every row weighed and sorted again (a filter that narrows the last one's,
        nothing changed since, at most half the rows shown: those weighed, their order
        kept); the live rollouts' keys, to `merge`."""
        source = self.source
        refines = self._refines(row_filter, column, reverse)
        self._shown_by = (row_filter, column, reverse)
        if refines:
            keep = finished_mask(row_filter, source, self.rows.astype(np.int64))
            self.rows = self.rows[keep]
            if self._keys is not None:
                self._keys = self._keys[keep]
            self.generation += 1
            self.changed = np.zeros(0, dtype=np.int64)
            self._placed()
            return self.live_keys(column, reverse, now, live)
        self.changed = source.changed_since(self.version)  # drawn rows of these are stale
        self.version = source.version
        alone = ~source.has_rollout()
        shown = np.flatnonzero(finished_mask(row_filter, source) & alone if row_filter else alone).astype(np.int32)
        self.generation += 1
        if column is not None and len(shown) > PARTIAL_FROM:
            # the keystroke's passes: the rows shown, their keys (kept), one partition
            keys, live_keys = self._column_keys(column, now, live)
            if reverse:
                live_keys = [-key for key in live_keys]
            shown_keys = keys if len(shown) == len(keys) else keys[shown]
            first = first_screen(-shown_keys if reverse else shown_keys)
            first_keys = -shown_keys[first] if reverse else shown_keys[first]
            self.rows, self._keys = on_top(shown, first), first_keys
            self.sorted_upto, self.pending, self._place = FIRST_SCREEN, (shown, shown_keys, reverse, source.count), None
            return list(zip(live_keys, self._live_rows(live), strict=True))
        if column is None:  # the run's order: the rows' keys are the rows
            self.rows, self._keys = shown, None
            live_pairs = self.live_keys(column, reverse, now, live)
        else:  # the shown rows' keys only: a filter that keeps a few of a million weighs a few
            keys, live_pairs = self._sort_keys(column, reverse, now, live, shown.astype(np.int64))
            order = np.argsort(keys, kind="stable")
            self.rows, self._keys = shown[order], keys[order]
        self.sorted_upto, self.pending = len(shown), None
        self._placed()
        return live_pairs

    def _refines(self, row_filter: RowFilter, column: str | None, reverse: bool) -> bool:
        if self._shown_by is None or self.pending is not None or self._shown_by[1:] != (column, reverse):
            return False
        shown_by = self._shown_by[0]
        if not shown_by or 2 * len(self.rows) > self.source.count:  # most rows shown: weighed as a subset, they cost more than every row
            return False
        changed = self.source.changed_since(self.version)
        return changed is not None and not len(changed) and bool(row_filter) and row_filter.narrows(shown_by)

    def sorted(self, generation: int, done: tuple[Rows, Keys, Places]) -> bool:
        """A big sort's full order (`full_order`), if the rows are still those it sorted."""
        if generation != self.generation or self.pending is None:
            return False
        self.rows, self._keys, self._place = done
        self.pending, self.sorted_upto = None, len(self.rows)
        return True

    def update(self, row_filter: RowFilter, column: str | None, reverse: bool, now: float, live: Sequence[Rollout]) -> list[LiveKey]:
        """The rows added or changed since the last look weighed again and put in their
        places (`changed`); everything again when too much changed to say."""
        source = self.source
        changed = source.changed_since(self.version)
        if changed is None:  # the rows started over (or too much changed to say): even a big sort under way is stale
            return self.build(row_filter, column, reverse, now, live)
        self.changed = np.zeros(0, dtype=np.int64)
        if self.pending is not None:  # a big sort under way: the changes wait for it (they stay in the rows' log)
            return self.live_keys(column, reverse, now, live)
        if self._shown_by != (row_filter, column, reverse):  # the rows shown are another filter's or order's
            return self.build(row_filter, column, reverse, now, live)
        assert self._place is not None  # no big sort under way
        known = len(self._place)
        if int((changed[changed < source.count] < known).sum()) > ONE_BY_ONE:  # the version not moved yet: every row is weighed
            return self.build(row_filter, column, reverse, now, live)
        self.changed = changed
        self.generation += 1
        self.version = source.version
        changed = changed[changed < source.count]
        if source.count != known:  # rows added (or the count fell): places for them, not a copy of every row's each look
            self._place = np.concatenate([self._place[: source.count], np.full(max(0, source.count - known), -1, dtype=np.int32)])
        if column in RANKED:  # a label new to the run moves every rank (the rows' order stays)
            keys, live_keys = self._sort_keys(column, reverse, now, live)
            self._keys = keys[self.rows]
            mine = keys[changed]
        else:
            mine, live_keys = self._sort_keys(column, reverse, now, live, changed)
        if len(changed):
            was = self._place[changed]
            wanted = finished_mask(row_filter, source, changed) & ~source.has_rollout()[changed]
            # a row still shown with the same key stays where it is (a step learnt, a
            # row annotated, in a table not sorted by either); by text, its old key is
            # gone with the old ranks: it is put back in its place
            shown_keys = self._shown_keys()
            no_old_key = column in RANKED or not len(shown_keys)
            same = np.zeros(len(changed), dtype=bool) if no_old_key else shown_keys[np.maximum(was, 0)] == mine
            stays = (was >= 0) & wanted & same
            moved, leaving = wanted & ~stays, (was >= 0) & ~stays
            if not moved.any() and not leaving.any():  # every changed row stays where it is
                return live_keys
            keep = np.ones(len(self.rows), dtype=bool)
            keep[was[leaving]] = False
            self.rows = self.rows[keep]
            if self._keys is not None:
                self._keys = self._keys[keep]
            new, new_keys = changed[moved], mine[moved]
            added = new >= known  # after every row there was: last among their equals
            order = np.lexsort((new[added], new_keys[added]))
            at = np.searchsorted(self._shown_keys(), new_keys[added][order], side="right")
            self.rows = np.insert(self.rows, at, new[added][order])
            if self._keys is not None:
                self._keys = np.insert(self._keys, at, new_keys[added][order])
            self.sorted_upto = len(self.rows)  # every row is in order: the changed rows go among the new ones too
            for row, key in zip(new[~added].tolist(), new_keys[~added].tolist(), strict=True):
                place = self._place_of(key, row)
                self.rows = np.insert(self.rows, place, row)
                if self._keys is not None:
                    self._keys = np.insert(self._keys, place, key)
                self.sorted_upto += 1
            self._placed()
        return live_keys

    def _place_of(self, key: float, row: float) -> int:
        """Where a row (or a live rollout) of `key` goes: among the rows of that key, by
        row (during a big sort, among the rows in order so far)."""
        keys = self._shown_keys()[: self.sorted_upto]
        low, high = int(np.searchsorted(keys, key, side="left")), int(np.searchsorted(keys, key, side="right"))
        return low + int(np.searchsorted(self.rows[low:high], row, side="right")) if math.isfinite(row) else high

    def _shown_keys(self) -> npt.NDArray[Any]:
        return self.rows if self._keys is None else self._keys

    def merge(self, live_keys: list[LiveKey]) -> None:
        """The live rollouts' positions by their keys (ascending) among the rows'."""
        before = [self._place_of(key, row) for key, row in live_keys]
        self.live_pos = np.array(before, dtype=np.int64) + np.arange(len(live_keys), dtype=np.int64)

    def live_keys(self, column: str | None, reverse: bool, now: float, live: Sequence[Rollout]) -> list[LiveKey]:
        """The live rollouts' sort keys in the rows' terms."""
        return self._sort_keys(column, reverse, now, live, np.zeros(0, dtype=np.int64))[1]

    def _column_keys(self, column: str, now: float, live: Sequence[Rollout]) -> tuple[Keys, list[float]]:
        """Every row's key by `column` (not reversed) and the live rollouts': those kept
        from the last sort by it, the rows changed since weighed again."""
        source = self.source
        kept = self._kept_keys.pop(column, None)
        keys: Keys | None = None
        if kept is not None and (changed := source.changed_since(kept[0])) is not None:
            changed = changed[changed < source.count]
            fresh, live_keys = sort_keys(column, source, live, now, changed)
            if kept[1] is ranks_made(column):  # the same ranks (no new label moved them): only the changed rows' keys move
                old = kept[2]
                keys = old if len(old) == source.count else np.concatenate([old, np.zeros(source.count - len(old))])[: source.count]
                keys[changed] = fresh
        if keys is None:
            keys, live_keys = sort_keys(column, source, live, now)
        self._kept_keys[column] = (source.version, ranks_made(column), keys)
        while len(self._kept_keys) > KEYS_KEPT:
            del self._kept_keys[next(iter(self._kept_keys))]
        return keys, live_keys

    def _live_rows(self, live: Sequence[Rollout]) -> list[float]:
        """Each live rollout's finished row (infinity: none)."""
        return [math.inf if (row := self.source.rollout_row(rollout.key)) is None else float(row) for rollout in live]

    def _sort_keys(
        self, column: str | None, reverse: bool, now: float, live: Sequence[Rollout], subset: Positions | None = None
    ) -> tuple[npt.NDArray[np.float64], list[LiveKey]]:
        """The rows' keys (those of `subset` only, if given) and the live rollouts'.
        Unsorted, the rows in the run's order and a rollout at its row's place (one
        still in flight on top)."""
        source = self.source
        rows = self._live_rows(live)
        if column is None:
            order = np.arange(source.count, dtype=np.float64) if subset is None else subset.astype(np.float64)
            return order, [(-1.0 if math.isinf(row) else row, row) for row in rows]
        keys, live_keys = sort_keys(column, source, live, now, subset)
        if reverse:
            keys, live_keys = -keys, [-key for key in live_keys]
        return keys, list(zip(live_keys, rows, strict=True))

    def _placed(self) -> None:
        if self.pending is None:
            self.sorted_upto = len(self.rows)
        place = np.full(self.source.count, -1, dtype=np.int32)
        place[self.rows] = np.arange(len(self.rows), dtype=np.int32)
        self._place = place

    # -- reading -----------------------------------------------------------------------

    def entry(self, position: int) -> tuple[bool, int]:
        """(live, index): the live rollout's index in the table's keys, or the finished row."""
        live = int(np.searchsorted(self.live_pos, position, side="left"))
        if live < len(self.live_pos) and int(self.live_pos[live]) == position:
            return True, live
        return False, int(self.rows[position - live])

    def changed_of(self, rows: list[int]) -> list[int]:
        """Those of `rows` the last look found changed (all, if it could not say): looked
        up among the changed, which after a poll can be a million new rows."""
        if self.changed is None:
            return rows
        found = np.isin(np.array(rows, dtype=np.int64), self.changed)
        return [row for row, hit in zip(rows, found.tolist(), strict=True) if hit]

    def live_position(self, index: int) -> int:
        return int(self.live_pos[index])

    def row_position(self, row: int) -> int | None:
        if self._place is None:  # a big sort under way: a pass over its rows
            found = np.flatnonzero(self.rows == row)
            at = int(found[0]) if len(found) else -1
        else:
            at = int(self._place[row]) if row < len(self._place) else -1
        if at < 0:
            return None
        # the finished rows before it, and the live rollouts placed before it
        shifted = self.live_pos - np.arange(len(self.live_pos), dtype=np.int64)
        return at + int(np.searchsorted(shifted, at, side="right"))


def on_top(rows: Rows, top: Positions) -> Rows:
    """`rows` with those at the places `top` moved, in that order, to the top, the
    ones they displace put where those were: a few rows moved, not every row."""
    found = rows.copy()
    displaced = np.setdiff1d(np.arange(len(top), dtype=np.int64), top)
    found[np.sort(top[top >= len(top)])] = rows[displaced]
    found[: len(top)] = rows[top]
    return found


def first_screen(keys: Keys) -> Positions:
    """The places of the `FIRST_SCREEN` smallest keys, in order, ties to the first
    places: what a stable sort of every key puts first (`argpartition` alone takes any
    of the rows tied at the cut, and the screen would change when the full order came)."""
    cut = min(FIRST_SCREEN, len(keys)) - 1
    parted = np.argpartition(keys, cut)[: cut + 1]
    edge = keys[parted[cut]]
    below = parted[keys[parted] < edge]  # all of them: argpartition puts every smaller key before the cut
    tied = np.flatnonzero(keys == edge)[: cut + 1 - len(below)]
    top = np.concatenate([below, tied]) if edge == edge else parted  # a NaN key ties with nothing
    return top[np.lexsort((top, keys[top]))]


def full_order(rows: Rows, keys: Keys, reverse: bool, count: int) -> tuple[Rows, Keys, Places]:
    """A big sort's every row in order, their keys (negated when reversed) and each
    row's place among `count`: run off the loop."""
    keys = -keys if reverse else keys
    order = np.argsort(keys, kind="stable")
    ordered = rows[order]
    place = np.full(count, -1, dtype=np.int32)
    place[ordered] = np.arange(len(ordered), dtype=np.int32)
    return ordered, keys[order], place
