"""A keystroke that only narrows the filter refines the rows shown instead of scanning
the store: the rows must be exactly those a full scan finds, for any rollouts and any
typing, with the store changing and time passing (stalls) between keys."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tui_standin import TableApp

from core.session.store import RolloutStore
from tui.rollout_filter import RowFilter
from tui.rollouts_table import RolloutsTable

STALL_SECONDS = 10.0
PIECES = (
    "status:", "variant:", "phase:", "stalled", "st", "s", "run", "r", "t", "ed", "queued",
    "fail", "cancel", "done", "starting", "alpha", "beta", "al", "a", "b", "task", "1", ",", " ",
)
rollouts = st.lists(
    st.tuples(
        st.sampled_from(("alpha", "beta", "Alpha-2")),
        st.text("ab1 ", max_size=6),
        st.sampled_from(("queued", "running", "failed", "cancelled")),
    ),
    max_size=25,
)
queries = st.lists(
    st.tuples(st.lists(st.sampled_from(PIECES), max_size=6).map("".join), st.booleans()), min_size=1, max_size=5
)
"""Each text typed a key at a time, or put in the field at once (a paste, an edit)."""
between = st.lists(
    st.tuples(st.integers(0, 24), st.sampled_from(("start", "fail", "cancel", "age", "add"))), max_size=3
)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def full_scan(store: RolloutStore, row_filter: RowFilter) -> set[str]:
    now = store.clock()
    return {
        key for key, rollout in store.rollouts.items()
        if not row_filter or row_filter.matches(rollout, now, store.stall_seconds)
    }


def change(store: RolloutStore, clock: Clock, index: int, what: str) -> None:
    keys = list(store.rollouts)
    if what == "age":
        clock.t += STALL_SECONDS + 1  # live rollouts cross the stall threshold with no delta
    elif what == "add":
        store.add_rollout("beta", index, {"name": f"late {index}"}, key=f"late/{len(keys)}")
    elif keys:
        key = keys[index % len(keys)]
        if store.rollouts[key].status.finished:
            return
        if what == "start":
            store.started(key, f"req-{key}")
        else:
            store.failed(key, "boom", cancelled=what == "cancel")


async def test_narrowing_keystrokes_match_a_full_scan() -> None:
    clock = Clock()
    app = TableApp(RolloutStore(stall_seconds=STALL_SECONDS, clock=clock))
    async with app.run_test(size=(140, 30)):
        table = app.query_one(RolloutsTable)

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(rollouts, queries, st.lists(between, min_size=40, max_size=40))
        @example([("alpha", "a", "running")], [("status:stalled", True)], [[]] * 9 + [[(0, "age")]])
        @example([("alpha", "a", "running")], [("status:t", False), ("status:st", False)], [[(0, "age")]])
        def typing(made: list[tuple[str, str, str]], typed: list[tuple[str, bool]], changes: list[list[tuple[int, str]]]) -> None:
            store = RolloutStore(stall_seconds=STALL_SECONDS, clock=clock)
            for index, (variant, task, status) in enumerate(made):
                key = f"{variant}/{index}"
                store.add_rollout(variant, index, {"name": task}, key=key)
                if status != "queued":
                    store.started(key, f"req-{key}")
                if status in ("failed", "cancelled"):
                    store.failed(key, "boom", cancelled=status == "cancelled")
            store.take_changes()
            table.store, table.row_filter = store, RowFilter()
            table.rebuild()
            moves = iter(changes)
            for text, by_key in typed:
                for end in range(len(text) + 1) if by_key else (len(text),):
                    for index, what in next(moves, ()):
                        change(store, clock, index, what)
                    row_filter = RowFilter.parse(text[:end])
                    table.set_filter(row_filter)
                    changed = store.take_changes()
                    table.sync([*changed.added, *changed.rollouts])
                    assert set(table.ordered_keys) == full_scan(store, row_filter), text[:end]
                    assert len(table.ordered_keys) == len(set(table.ordered_keys))

        typing()


async def test_typing_a_narrower_filter_scans_only_the_rows_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    store = RolloutStore()
    for index in range(40):
        key = f"v/{index}"
        store.add_rollout("v", index, {"name": f"task {index}"}, key=key)
        if index % 2:
            store.started(key, f"req-{key}")
    app = TableApp(store)
    async with app.run_test(size=(140, 30)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        table.set_filter(RowFilter.parse("status:"))
        seen: list[str] = []
        matches = RowFilter.matches

        def counting(self: RowFilter, rollout, now, stall_seconds):  # type: ignore[no-untyped-def]
            seen.append(rollout.key)
            return matches(self, rollout, now, stall_seconds)

        monkeypatch.setattr(RowFilter, "matches", counting)
        for end in range(len("status:r"), len("status:running") + 1):
            table.set_filter(RowFilter.parse("status:running"[:end]))
        assert table.row_count == 20
        # "status:r" looks at all 40 rows, each further letter only at the 20 left
        assert len(seen) == 40 + 20 * len("unning")
