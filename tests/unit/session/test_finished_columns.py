"""A followed prime-rl run's finished rows kept as columns (`RunRows`, the screen's
way) say what the rollouts made of the same rows (the headless and offline way) say:
a filter compiled to a mask over the columns lets the same episodes through as its
test of each rollout, a sort over the columns orders them as the rollouts' values do,
and a card, compare and the run's series count them alike. Rows and filters are generated, hostile ones included
(absent fields, ids that are not hex, a word across the key's slash)."""

from __future__ import annotations

import json
import math
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tracewatch.core.engine.coded_task_numbers import CodedTaskNumbers
from tracewatch.core.engine.followed_run import FollowedRun
from tracewatch.core.engine.run_rows import RunRows
from tracewatch.core.recordings.prime_rl.layout import StreamRun, find_run
from tracewatch.core.session.compare import Comparison, compare_store
from tracewatch.core.session.finished_columns import finished_mask, sort_keys
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.tui.table import finished_index
from tracewatch.tui.table.columns import BY_KEY

NOW = 1.79e9 + 10_000

hex_ids = st.uuids().map(lambda value: value.hex)
numbers = st.one_of(st.none(), st.integers(-2, 40), st.just(2**31 - 1))
"""Counts, with the largest a column keeps: two of them summed (the tokens) must not wrap."""
index_rows = st.fixed_dictionaries(
    {
        "id": st.one_of(hex_ids, st.none(), st.sampled_from(["ep/1", "Episode-X", "row-x"])),
        "kind": st.sampled_from(["train", "eval", None]),
        "env": st.sampled_from(["gsm8k", "math", "Code", None]),
        "group": st.sampled_from(["g1", "g2", None]),
        "ok": st.sampled_from([True, False, None]),
        "num_errors": st.integers(0, 3),
        "reward": st.one_of(st.none(), st.floats(-1, 2, allow_nan=False)),
        "turns": numbers,
        "input_tokens": numbers,
        "output_tokens": numbers,
        "trace_ids": st.lists(st.one_of(hex_ids, st.just("not-hex trace")), max_size=2),
        "dispatch": st.floats(1.79e9, 1.79e9 + 100),
        "arrival": st.floats(1.79e9, 1.79e9 + 300),
    }
)
"""prime-rl writes `dispatch` and `arrival` from the episode's own info: a row always has them."""
runs = st.lists(index_rows, min_size=1, max_size=24, unique_by=lambda row: row["id"] or uuid.uuid4().hex)


def write(out: Path, rows: list[dict[str, Any]], used: list[bool | None]) -> StreamRun:
    traces = out / "monitors" / "file" / "traces"
    (traces / "stream").mkdir(parents=True)
    (traces / "annotations" / "orchestrator").mkdir(parents=True)
    with open(traces / "stream.index.jsonl", "w") as index, open(traces / "annotations" / "orchestrator.index.jsonl", "w") as notes:
        for line, (row, effective) in enumerate(zip(rows, used, strict=True)):
            index.write(json.dumps({**row, "line": line, "offset": 0, "chunk": 0}) + "\n")
            if effective is not None and row["trace_ids"] and row["trace_ids"][0] != "not-hex trace":
                info = {"effective": effective, "ship": {"step": line % 3}}
                notes.write(json.dumps({"trace_id": row["trace_ids"][0], "chunk": 0, "offset": 0, "info": info}) + "\n")
    found = find_run(out)
    assert isinstance(found, StreamRun)
    return found


def both(rows: list[dict[str, Any]], data: st.DataObject) -> tuple[FollowedRun, FollowedRun, RunRows]:
    """The same run (its rows' trace annotated used or not, or neither) read as
    rollouts and as columns."""
    used = data.draw(st.lists(st.sampled_from([True, False, None]), min_size=len(rows), max_size=len(rows)))
    out = Path(tempfile.mkdtemp(prefix="tw-columns-")) / "out"
    layout = write(out, rows, used)
    rollouts, columns = FollowedRun(layout, follow=False).snapshot(), FollowedRun(layout, follow=False, columns=True).snapshot()
    assert columns.rows is not None and columns.rows.count == len(rows) and not columns.store.rollouts
    return rollouts, columns, columns.rows


def tokens_of(session: FollowedRun) -> list[str]:
    """Filter words taken from what rows show: parts of keys, tasks, trace ids."""
    found = {"task", "train:", "eval:math/", "/", "zz", "not-hex", "row-", "g1"}
    for rollout in session.store.rollouts.values():
        for text in (rollout.key.lower(), rollout.task_label.lower(), *rollout.trace_ids):
            found.update({text[:3], text[-4:], text[2:9]})
    return sorted(word for word in found if word and " " not in word)


def cells(comparison: Comparison) -> dict[object, object]:
    """Each task's cells, every list of numbers sorted."""
    return {
        task: {name: (sorted(c.rewards), sorted(c.turns), sorted(c.tokens), sorted(c.seconds), c.errors, c.failed, c.cancelled) for name, c in by_variant.items()}
        for task, by_variant in comparison.tasks.items()
    }


@st.composite
def filters(draw: st.DrawFn, words: list[str]) -> str:
    parts = st.one_of(
        st.sampled_from(words),
        st.builds(lambda v: f"variant:{v}", st.sampled_from(["gsm", "eval", "train:c", "code", "x"])),
        st.builds(lambda v: f"status:{v}", st.sampled_from(["done", "fail", "d", "stalled", "running,failed"])),
        st.builds(lambda v: f"phase:{v}", st.sampled_from(["done", "err", "e", "agent"])),
        st.builds(
            lambda field, op, number: f"{field}:{op}{number}",
            st.sampled_from(["reward", "turns", "tokens", "errors", "elapsed", "step", "used"]),
            st.sampled_from(["<", "<=", ">", ">=", "=", ""]),
            st.sampled_from(["0", "1", "0.5", "2", "30", "-1"]),
        ),
        st.builds(lambda v: f"error:{v}", st.sampled_from(["error", "1 error", "not ok", "ended"])),
        st.just("flag:misaligned"),
    )
    return " ".join(draw(st.lists(parts, max_size=3)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=runs, data=st.data())
def test_a_filter_over_the_columns_lets_through_what_it_lets_through_of_the_rollouts(rows, data):
    rollouts, _, table = both(rows, data)
    keys = [table.key(row) for row in range(table.count)]
    assert sorted(keys) == sorted(rollouts.store.rollouts), "the same rows under the same keys"
    for _ in range(6):
        text = data.draw(filters(tokens_of(rollouts)))
        row_filter = RowFilter.parse(text)
        wanted = {key for key, rollout in rollouts.store.rollouts.items() if row_filter.matches(rollout, NOW, rollouts.store.is_stalled)}
        mask = finished_mask(row_filter, table)
        shown = {keys[row] for row in np.flatnonzero(mask).tolist()}
        assert shown == wanted, (text, sorted(shown ^ wanted))
        some = np.array(data.draw(st.lists(st.integers(0, table.count - 1), max_size=6)), dtype=np.int64)
        assert finished_mask(row_filter, table, some).tolist() == mask[some].tolist(), "a few rows weighed alone as among all"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=runs, data=st.data())
def test_a_sort_over_the_columns_orders_rows_as_the_rollouts_values_do(rows, data):
    rollouts, columns, table = both(rows, data)
    by_key = rollouts.store.rollouts
    for column in BY_KEY:
        finished, _ = sort_keys(column, table, [], NOW)
        some = np.arange(table.count, dtype=np.int64)[::2]
        assert sort_keys(column, table, [], NOW, some)[0].tolist() == finished[some].tolist()
        values = [BY_KEY[column].sort(by_key[table.key(row)], NOW) for row in np.argsort(finished, kind="stable").tolist()]
        assert values == sorted(values), column  # in the rollouts' own order, ties aside
    # compare puts them under the same tasks with the same numbers (in a cell that two
    # tasks of one label share, in another order)
    assert cells(compare_store(columns.store)) == cells(compare_store(rollouts.store))
    # the run's series (the Trends and Timeline tabs) counts them alike
    mine, theirs = columns.store.series, rollouts.store.series
    assert (mine.origin, mine.width, mine.first, mine.last) == (theirs.origin, theirs.width, theirs.first, theirs.last)
    for variant in rollouts.store.variants:
        for ours, their in zip(mine.columns(variant, theirs.first, theirs.last + 1, 7), theirs.columns(variant, theirs.first, theirs.last + 1, 7), strict=True):
            counted = lambda c: (c.waiting, c.running, c.sums.done, c.sums.failed, c.sums.rewarded, c.sums.tokens, c.sums.waiting)  # noqa: E731
            assert counted(ours) == counted(their)
            assert math.isclose(ours.sums.reward_sum, their.sums.reward_sum, abs_tol=1e-6)
    # and the cards count them alike
    for variant in rollouts.store.variants:
        mine, theirs = columns.store.stats(variant), rollouts.store.stats(variant)
        assert mine.counts == theirs.counts and mine.scored == theirs.scored
        assert (mine.mean_reward is None) == (theirs.mean_reward is None)
        assert mine.mean_reward is None or math.isclose(mine.mean_reward, theirs.mean_reward or 0.0, abs_tol=1e-9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rows=runs, data=st.data())
def test_a_big_sort_s_first_screen_and_full_order_are_one_stable_sort_s(rows, data, monkeypatch):
    """The table's index sorts many rows in two steps (the first screen's rows at once,
    every row off the loop: `full_order`) and keeps a column's keys between its sorts,
    the rows changed since weighed again: each step says what one stable sort of the
    rows shown says, whatever changed between the sorts (here "many" is made small)."""
    rollouts, _, table = both(rows, data)
    first = data.draw(st.integers(1, table.count))
    monkeypatch.setattr(finished_index, "FIRST_SCREEN", first)
    monkeypatch.setattr(finished_index, "PARTIAL_FROM", first)
    index = finished_index.FinishedIndex(table)
    for _ in range(6):
        if data.draw(st.booleans()):  # a row's reward changed (an annotation), or a rollout took a row
            row = data.draw(st.integers(0, table.count - 1))
            table.table.column("reward")[row] = data.draw(st.floats(-1, 2, allow_nan=False))
            table.changed(np.array([row], dtype=np.int64))
            if data.draw(st.booleans()):
                table.set_has_rollout(data.draw(st.integers(0, table.count - 1)))
        column = data.draw(st.one_of(st.sampled_from(["reward", "task"]), st.sampled_from(sorted(BY_KEY))))  # often one sorted by before
        reverse = data.draw(st.booleans())
        row_filter = RowFilter.parse(data.draw(filters(tokens_of(rollouts))))
        index.build(row_filter, column, reverse, NOW, [])
        shown = np.flatnonzero(finished_mask(row_filter, table) & ~table.has_rollout())
        keys = sort_keys(column, table, [], NOW)[0] * (-1 if reverse else 1)
        whole = shown[np.argsort(keys[shown], kind="stable")]
        top = min(first, len(shown))
        assert index.rows[:top].tolist() == whole[:top].tolist(), (column, reverse, "the first screen, ties as the full order has them")
        assert sorted(index.rows.tolist()) == shown.tolist(), "every row shown once"
        if index.pending is not None:
            assert index.sorted(index.generation, finished_index.full_order(*index.pending))
        assert index.rows.tolist() == whole.tolist(), (column, reverse, "every row")
        assert [index.row_position(row) for row in whole.tolist()] == list(range(len(whole)))


def derived(table: RunRows, name: str) -> list[float]:
    """A derived column made from the run's own columns afresh."""
    run = table.table
    if name == "tokens":
        given, taken = run.column("input_tokens")[: table.count].tolist(), run.column("output_tokens")[: table.count].tolist()
        return [-1 if g < 0 and t < 0 else max(g, 0) + max(t, 0) for g, t in zip(given, taken, strict=True)]
    if name == "elapsed":
        return np.maximum(run.column("arrival") - run.column("dispatch"), 0.0)[: table.count].tolist()
    steps, source = run.steps()
    return np.where(source != 0, steps, -1)[: table.count].tolist()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=runs, data=st.data())
def test_a_derived_column_kept_between_looks_is_the_one_made_afresh(rows, data):
    """Tokens, elapsed and step are kept and made again only for the rows changed since
    the last look (every row when the change log no longer reaches back)."""
    _, _, table = both(rows, data)
    run = table.table
    for _ in range(4):
        for name in ("tokens", "elapsed", "step"):
            assert table.column(name).tolist() == derived(table, name), name
        for _ in range(data.draw(st.sampled_from([0, 1, 3, 70]))):  # 70: past the changes kept
            row = data.draw(st.integers(0, table.count - 1))
            field = data.draw(st.sampled_from(["dispatch_step", "ship_step", "input_tokens", "output_tokens", "arrival"]))
            run.column(field)[row] = data.draw(st.floats(1.79e9, 1.79e9 + 400)) if field == "arrival" else data.draw(st.integers(-1, 9))
            table.changed(np.array([row], dtype=np.int64))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=runs, data=st.data())
def test_rows_added_and_changed_in_one_look_go_where_a_sort_of_every_row_puts_them(rows, data):
    """A poll adds rows and an annotation changes older ones: `update` puts both in
    their places (a changed row whose key falls among the new rows once went before them)."""
    _, _, whole = both(rows, data)
    numbers: dict[str, CodedTaskNumbers] = {}
    table = RunRows(whole.table, lambda name: numbers.setdefault(name, CodedTaskNumbers()), {})
    table.extend(data.draw(st.integers(0, whole.count)))
    index = finished_index.FinishedIndex(table)
    column, reverse = data.draw(st.sampled_from(["reward", "turns", "tokens", None])), data.draw(st.booleans())
    index.build(RowFilter.parse(""), column, reverse, NOW, [])
    for _ in range(3):
        for row in data.draw(st.lists(st.integers(0, max(table.count - 1, 0)), max_size=3)) if table.count else []:
            whole.table.column("reward")[row] = data.draw(st.floats(-1, 2, allow_nan=False))
            table.changed(np.array([row], dtype=np.int64))
        table.extend(data.draw(st.integers(table.count, whole.count)))
        index.update(RowFilter.parse(""), column, reverse, NOW, [])
        shown = np.arange(table.count, dtype=np.int64)
        keys = index._sort_keys(column, reverse, NOW, [])[0]
        assert index.rows.tolist() == shown[np.argsort(keys[shown], kind="stable")].tolist(), (column, reverse)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rows=runs, data=st.data())
def test_an_index_updated_after_rows_changed_shows_what_a_new_index_would(rows, data, monkeypatch):
    """Steps, tasks and rewards learnt for rows shown and hidden, fewer or more than an
    update puts back one by one: the updated index shows the rows a new one would, in
    its order (a fallback to a whole build once weighed only the rows shown; a row whose
    task changed in a table sorted by task once stayed where it was)."""
    monkeypatch.setattr(finished_index, "ONE_BY_ONE", data.draw(st.sampled_from([1, 4096])))
    _, _, table = both(rows, data)
    run = table.table
    column, reverse = data.draw(st.sampled_from([None, "reward", "task", "tokens"])), data.draw(st.booleans())
    row_filter = RowFilter.parse(data.draw(st.sampled_from(["", "step:>=1", "reward:<0.5", "task 1"])))
    index = finished_index.FinishedIndex(table)
    index.build(row_filter, column, reverse, NOW, [])
    for _ in range(3):
        changed = data.draw(st.lists(st.integers(0, table.count - 1), max_size=4))
        for row in changed:
            field = data.draw(st.sampled_from(["dispatch_step", "reward", "task"]))
            if field == "task":
                run.set_task(row, data.draw(st.sampled_from(["a", "m", "task 1"])))
            elif field == "reward":
                run.column("reward")[row] = data.draw(st.floats(-1, 2, allow_nan=False))
            else:
                run.column("dispatch_step")[row] = data.draw(st.integers(-1, 3))
        table.changed(np.array(changed, dtype=np.int64))
        index.update(row_filter, column, reverse, NOW, [])
        fresh = finished_index.FinishedIndex(table)
        fresh.build(row_filter, column, reverse, NOW, [])
        assert index.rows.tolist() == fresh.rows.tolist(), (str(row_filter), column, reverse)


def plain_rows(rewards: list[float]) -> list[dict[str, Any]]:
    return [
        {"id": uuid.uuid4().hex, "kind": "train", "env": "gsm8k", "group": None, "ok": True, "num_errors": 0, "reward": reward,
         "turns": 1, "input_tokens": 1, "output_tokens": 1, "trace_ids": [uuid.uuid4().hex], "dispatch": 1.79e9, "arrival": 1.79e9 + 1}
        for reward in rewards
    ]


def test_a_changed_row_whose_key_falls_among_rows_added_in_the_same_look_goes_after_them(tmp_path):
    rewards = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    whole = FollowedRun(write(tmp_path / "out", plain_rows(rewards), [None] * 7), follow=False, columns=True).snapshot().rows
    assert whole is not None
    numbers: dict[str, CodedTaskNumbers] = {}
    table = RunRows(whole.table, lambda name: numbers.setdefault(name, CodedTaskNumbers()), {})
    table.extend(5)
    index = finished_index.FinishedIndex(table)
    index.build(RowFilter.parse(""), "reward", False, NOW, [])
    whole.table.column("reward")[0] = 0.9
    table.changed(np.array([0], dtype=np.int64))
    table.extend(7)
    index.update(RowFilter.parse(""), "reward", False, NOW, [])
    assert index.rows.tolist() == [1, 2, 3, 4, 5, 6, 0]


def test_a_row_whose_task_changed_moves_in_a_table_sorted_by_task(tmp_path):
    """A record read for its step can name the task alone: sorted by task, the row
    goes where its new task sorts (it once kept its place, its new key compared with
    itself)."""
    session = FollowedRun(write(tmp_path / "out", plain_rows([0.1, 0.2, 0.3]), [None] * 3), follow=False, columns=True).snapshot()
    table = session.rows
    assert table is not None
    for row, task in enumerate(["m", "n", "o"]):
        table.table.set_task(row, task)
    table.changed(np.arange(3, dtype=np.int64))
    index = finished_index.FinishedIndex(table)
    index.build(RowFilter.parse(""), "task", False, NOW, [])
    assert index.rows.tolist() == [0, 1, 2]
    table.table.set_task(2, "a")
    table.changed(np.array([2], dtype=np.int64))
    index.update(RowFilter.parse(""), "task", False, NOW, [])
    assert index.rows.tolist() == [2, 0, 1]


def test_rows_started_over_during_a_big_sort_are_weighed_again_and_its_result_refused(tmp_path, monkeypatch):
    """The index was replaced while a big sort's rest was pending: the update builds
    again at once (it waited for the sort, and the sort's rows were the old table's)."""
    monkeypatch.setattr(finished_index, "FIRST_SCREEN", 2)
    monkeypatch.setattr(finished_index, "PARTIAL_FROM", 2)
    layout = write(tmp_path / "out", plain_rows([r / 10 for r in range(6)]), [None] * 6)
    session = FollowedRun(layout, follow=False, columns=True).snapshot()
    assert session.rows is not None
    index = finished_index.FinishedIndex(session.rows)
    index.build(RowFilter.parse(""), "reward", True, NOW, [])
    assert index.pending is not None
    stale = index.generation, finished_index.full_order(*index.pending)
    session.rows.reset(session.run.table)
    session.rows.extend(3)
    index.update(RowFilter.parse(""), "reward", True, NOW, [])
    assert not index.sorted(*stale), "the old table's order is refused"
    assert sorted(index.rows.tolist()) == [0, 1, 2]


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(2_000, 60_000))
def test_a_big_sort_s_first_screen_is_the_stable_sort_s_first_rows_among_many_ties(seed, distinct, count):
    """`argpartition` alone takes any of the rows tied at the cut: the first screen then
    changed rows when the full order came, the cursor's row with it."""
    keys = np.random.default_rng(seed).integers(0, distinct, count).astype(np.float64)
    assert finished_index.first_screen(keys).tolist() == np.argsort(keys, kind="stable")[: finished_index.FIRST_SCREEN].tolist()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rows=runs, data=st.data())
def test_a_filter_that_narrows_the_last_weighs_only_the_rows_shown_and_shows_what_a_new_index_would(rows, data, monkeypatch):
    """Typing on (a word longer, a term more) refines the rows shown, in their order,
    rather than weighing every row, once they are at most half the rows (weighed as a
    subset, most of a million cost more than every row): the same rows in the same
    order as a new index's."""
    rollouts, _, table = both(rows, data)
    column, reverse = data.draw(st.sampled_from([None, "reward", "task", "tokens"])), data.draw(st.booleans())
    wider = data.draw(filters(tokens_of(rollouts)))
    narrower = f"{wider} {data.draw(filters(tokens_of(rollouts)))}"
    assume(RowFilter.parse(wider) and RowFilter.parse(narrower).narrows(RowFilter.parse(wider)))
    index = finished_index.FinishedIndex(table)
    index.build(RowFilter.parse(wider), column, reverse, NOW, [])
    weighed: list[int | None] = []
    real = finished_index.finished_mask
    monkeypatch.setattr(finished_index, "finished_mask", lambda f, source, subset=None: weighed.append(None if subset is None else len(subset)) or real(f, source, subset))
    shown_before = len(index.rows)
    index.build(RowFilter.parse(narrower), column, reverse, NOW, [])
    assert weighed == ([shown_before] if 2 * shown_before <= table.count else [None]), "only the rows the wider filter showed are weighed"
    monkeypatch.undo()
    fresh = finished_index.FinishedIndex(table)
    fresh.build(RowFilter.parse(narrower), column, reverse, NOW, [])
    assert index.rows.tolist() == fresh.rows.tolist(), (wider, narrower, column, reverse)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rows=runs, data=st.data())
def test_a_sort_of_a_filtered_table_weighs_only_the_rows_it_shows(rows, data, monkeypatch):
    """A filter that keeps a few of a million rows, then a sort: the few rows' keys are
    made, not every row's, and they stand where a sort of every row's keys puts them."""
    rollouts, _, table = both(rows, data)
    text = data.draw(filters(tokens_of(rollouts)))
    column, reverse = data.draw(st.sampled_from(["reward", "task", "tokens", "turns", "elapsed"])), data.draw(st.booleans())
    shown = np.flatnonzero(finished_mask(RowFilter.parse(text), table))
    every, _ = sort_keys(column, table, [], NOW)
    weighed: list[int | None] = []
    real = finished_index.sort_keys
    monkeypatch.setattr(finished_index, "sort_keys", lambda *a, **k: weighed.append(None if len(a) < 5 or a[4] is None else len(a[4])) or real(*a, **k))
    index = finished_index.FinishedIndex(table)
    index.build(RowFilter.parse(text), column, reverse, NOW, [])
    assert weighed == [len(shown)], "only the rows shown are weighed"
    keys = -every[shown] if reverse else every[shown]
    assert index.rows.tolist() == shown[np.argsort(keys, kind="stable")].tolist(), (text, column, reverse)
