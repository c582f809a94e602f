"""A keystroke skips the store where it can: a filter that lets the same rollouts
through as the last one looks at no row, one that only narrows it refines the rows
shown, and each row's test is the filter compiled once (`RowFilter.matcher`, words
looked up in the rollout's kept `search_text`). The rows must be exactly those a full
scan with the filter's plain definition (`reference_matches`) finds, for any rollouts
and any typing, with the store changing, traces opening, going and leaving memory, tool
results trained on (flags), and time passing
(stalls) between keys."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from textual.strip import Strip
from textual.widgets import Input

from tests.support.filter_reference import reference_matches
from tests.support.polling import until
from tests.support.tui_standin import TableApp, make_engine, queued_and_running
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.table import rollouts_table
from tracewatch.tui.table.rollouts_table import PASS_CHUNK, RolloutsTable

STALL_SECONDS = 10.0
PIECES = (
    "status:", "variant:", "phase:", "stalled", "st", "s", "run", "r", "t", "ed", "queued",
    "fail", "cancel", "done", "starting", "alpha", "beta", "al", "a", "b", "task", "1", ",", " ",
    "ag", "agent", "boot", "error", "2", "ab",
    "reward:", "tokens:", "elapsed:", "errors:", "turns:", "error:", "<", ">=", ">", "=", "0", "0.5", "15", "1m", "x", "boom", "oo",
    "flag:", "tool", "tool-trained", "mis", "-", ":", "1:30", "²", "③", "١",
)
"""What a user types, and characters `float` refuses that `str.isdigit` takes (`²`)."""
rollouts = st.lists(
    st.tuples(
        st.sampled_from(("alpha", "beta", "Alpha-2")),
        st.text("ab1 ", max_size=6),
        st.sampled_from(("queued", "running", "failed", "cancelled")),
    ),
    max_size=25,
)
queries = st.lists(
    st.tuples(st.lists(st.sampled_from(PIECES) | st.text(max_size=3), max_size=6).map("".join), st.booleans()), min_size=1, max_size=5
)
"""Each text typed a key at a time, or put in the field at once (a paste, an edit)."""
between = st.lists(
    st.tuples(st.integers(0, 24), st.sampled_from(("start", "fail", "cancel", "age", "add", "open", "discard", "unload", "train"))), max_size=3
)
TRACE_IDS = ("ab1", "ba", "2ab", "tr")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def full_scan(store: RolloutStore, row_filter: RowFilter) -> set[str]:
    now = store.clock()
    return {key for key, rollout in store.rollouts.items() if reference_matches(row_filter, rollout, now, store.is_stalled)}


def change(store: RolloutStore, clock: Clock, index: int, what: str) -> None:
    keys = list(store.rollouts)
    if what == "age":
        clock.t += STALL_SECONDS + 1  # live rollouts cross the stall threshold with no delta
    elif what == "add":
        store.add_rollout("beta", index, {"name": f"late {index}"}, key=f"late/{len(keys)}")
    elif keys:
        key = keys[index % len(keys)]
        rollout = store.rollouts[key]
        if rollout.status.finished:
            if what == "unload":  # its trace ids are then the summary's
                store.unload(key)
            return
        if what == "train":  # a tool result trained on raises a flag as it lands
            if rollout.status is Status.RUNNING:
                if "tr" not in rollout.traces:
                    store.apply_delta(key, {"trace": "tr", "open": {}})
                node = {"message": {"role": "tool", "content": "x"}, "token_ids": [1], "mask": [True], "semantic_parents": []}
                store.apply_delta(key, {"trace": "tr", "nodes": [node]})
        elif what in ("open", "discard"):
            if rollout.status is Status.RUNNING:  # a trace's id is searched by words
                trace = TRACE_IDS[index % len(TRACE_IDS)]
                store.apply_delta(key, {"trace": trace, "discard": True} if what == "discard" else {"trace": trace, "open": {}})
        elif what == "start":
            store.started(key, f"req-{key}")
        else:
            store.failed(key, "boom", cancelled=what == "cancel")


def finish(table: RolloutsTable, store: RolloutStore, clock: Clock, moves: list[tuple[int, str]]) -> None:
    """The table's pass a chunk at a time, as its frames would run it, the store
    changing between chunks; a key's pass that looks at the rows shown runs at once."""
    while table.filtering:
        for index, what in moves:
            change(store, clock, index, what)
        changed = store.take_changes()
        table.sync([*changed.added, *changed.rollouts])
        table._weigh(table._pass)  # type: ignore[arg-type]


@pytest.mark.parametrize("chunk", [PASS_CHUNK, 3])
async def test_narrowing_keystrokes_match_a_full_scan(chunk: int) -> None:
    """With a chunk of 3 rows, a pass runs over several frames with the store changing
    between them, and a key may come before the last pass ended."""
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
            table.store, table.row_filter, table.pass_chunk = store, RowFilter(), chunk
            table.set_filter(RowFilter())  # a pass a last example left is dropped
            table.rebuild()
            moves = iter(changes)
            for text, by_key in typed:
                for end in range(len(text) + 1) if by_key else (len(text),):
                    for index, what in next(moves, ()):
                        change(store, clock, index, what)
                    row_filter = RowFilter.parse(text[:end])
                    table.set_filter(row_filter)
                    if end < len(text) and not end % 2:
                        continue  # the next key comes while this one's pass runs
                    finish(table, store, clock, next(moves, []))
                    changed = store.take_changes()
                    table.sync([*changed.added, *changed.rollouts])
                    assert set(table.ordered_keys) == full_scan(store, row_filter), text[:end]
                    assert len(table.ordered_keys) == len(set(table.ordered_keys))
                    compiled = row_filter.matcher(clock.t, store.is_stalled)
                    for rollout in store.rollouts.values():
                        assert compiled(rollout) == reference_matches(row_filter, rollout, clock.t, store.is_stalled)

        typing()


async def test_typing_a_narrower_filter_looks_only_at_the_rows_shown_or_at_none(monkeypatch: pytest.MonkeyPatch) -> None:
    store = queued_and_running(40, running_every=2)
    app = TableApp(store)
    async with app.run_test(size=(140, 30)):
        table = app.query_one(RolloutsTable)
        table.rebuild()
        table.set_filter(RowFilter.parse("status:"))
        seen: list[str] = []
        matcher = RowFilter.matcher

        def counting(self: RowFilter, now: float, is_stalled):  # type: ignore[no-untyped-def]
            test = matcher(self, now, is_stalled)

            def looked(rollout: Rollout) -> bool:
                seen.append(rollout.key)
                return test(rollout)

            return looked

        monkeypatch.setattr(RowFilter, "matcher", counting)
        for end in range(len("status:r"), len("status:running") + 1):
            table.set_filter(RowFilter.parse("status:running"[:end]))
        assert table.row_count == 20
        # "status:r" looks at all 40 rows; "status:ru" leaves out unobserved, the other
        # status with an r, so it looks at the 20 shown; the further letters let the
        # same rollouts through and look at none
        assert len(seen) == 40 + 20
        table.set_filter(RowFilter.parse("status:running 1"))
        assert table.row_count == 8 and len(seen) == 60 + 20  # 1, 11, 13, ..., 19, 21, 31
        table.set_filter(RowFilter.parse("status:running 1 variant:v"))  # the only variant
        assert table.row_count == 8 and len(seen) == 80


async def test_a_key_reaches_the_screen_before_a_long_pass_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The field is painted with the key while the table still shows the last filter's
    rows: the pass over every rollout (here 4 a frame) comes after, and its rows are
    a full scan's."""
    monkeypatch.setattr(rollouts_table, "PASS_CHUNK", 4)
    app = TracewatchApp(make_engine(copies=3))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count == 42)
        field = app.query_one("#filter", Input)
        painted: list[tuple[str, int]] = []
        render_line = field.render_line

        def line(y: int) -> Strip:
            painted.append((field.value, app.table.row_count))
            return render_line(y)

        monkeypatch.setattr(field, "render_line", line)
        await pilot.press("slash", "1", "7")
        await until(pilot, lambda: app.table.row_count == len(full_scan(app.store, RowFilter.parse("17"))) < 42, "the rows filtered")
        first = next(rows for value, rows in painted if value == "17")
        assert first == 42, f"the key was first painted over {first} rows, not the last filter's 42"
        assert set(app.table.ordered_keys) == full_scan(app.store, RowFilter.parse("17"))
