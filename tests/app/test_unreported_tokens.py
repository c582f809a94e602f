"""A token count the source never reported is not a count of 0: the table shows "-",
a filter on tokens does not let it through, a sort puts it with the other unknowns, and
compare's means leave it out, for a rollout on the wire and for a prime-rl row kept as
columns alike."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.polling import until
from tests.support.tui_standin import StandInEngine, StandInVariant
from tracewatch.core.engine.followed_run import FollowedRun
from tracewatch.core.engine.headless import rollout_line
from tracewatch.core.recordings.prime_rl.layout import StreamRun, find_run
from tracewatch.core.session.compare import compare_store
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.core.session.status import Ending, Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.app import TracewatchApp

T0 = 1_700_000_000.0
COUNTS = {"silent": None, "zero": 0, "counted": 700}
"""Each rollout's `num_total_tokens` (None: its trace never set one)."""


def engine() -> StandInEngine:
    store = RolloutStore(clock=lambda: T0 + 30.0)
    for number, (name, tokens) in enumerate(COUNTS.items()):
        key = f"solo/{name}"
        store.add_rollout("solo", number, {"name": "task"}, key=key, t=T0)
        store.started(key, "req", t=T0)
        scalars: dict[str, object] = {"rewards": {"r": {"score": 1.0}}}
        if tokens is not None:
            scalars["num_total_tokens"] = tokens
        store.apply_delta(key, {"trace": name, "open": {"id": name}, "set": scalars}, t=T0 + 1)
        store.ended(key, Ending(Status.DONE, None), t=T0 + 2)
    return StandInEngine(store, {"solo": StandInVariant("solo", store)})


async def test_a_rollout_whose_trace_reported_no_tokens_reads_as_unknown() -> None:
    session = engine()
    rollouts = session.store.rollouts
    assert rollouts["solo/silent"].tokens is None and rollouts["solo/zero"].tokens == 0
    assert "- tokens" in rollout_line(rollouts["solo/silent"], T0 + 30), "headless"
    assert "0 tokens" in rollout_line(rollouts["solo/zero"], T0 + 30)
    few = RowFilter.parse("tokens:<10")
    assert {key for key, r in rollouts.items() if few.matches(r, T0 + 30, session.store.is_stalled)} == {"solo/zero"}
    (cell,) = compare_store(session.store).tasks.values()
    assert sorted(cell["solo"].tokens) == [0, 700], "compare counts the reported ones only"
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.table
        await until(pilot, lambda: table.row_count == 3)
        assert [table.cell_text(f"solo/{name}", "tokens") for name in COUNTS] == ["-", "0", "700"]
        table.sort_by("tokens", False)
        await until(pilot, lambda: table.ordered_keys == ["solo/silent", "solo/zero", "solo/counted"], "the unknown first, as a missing reward")


def stream_run(out: Path) -> StreamRun:
    """A prime-rl run's finished index: one row with no token counts, one with 0 in and
    12 out, one with counts."""
    traces = out / "monitors" / "file" / "traces"
    (traces / "stream").mkdir(parents=True)
    counts = [(None, None), (0, 12), (300, 400)]
    with open(traces / "stream.index.jsonl", "w") as index:
        for line, (given, taken) in enumerate(counts):
            row = {"id": f"{line:032x}", "kind": "train", "env": "gsm8k", "ok": True, "reward": 1.0, "num_errors": 0, "turns": 2}
            row |= {"input_tokens": given, "output_tokens": taken, "trace_ids": [f"{line + 100:032x}"], "dispatch": T0, "arrival": T0 + 5}
            index.write(json.dumps({**row, "line": line, "offset": 0, "chunk": 0}) + "\n")
    found = find_run(out)
    assert isinstance(found, StreamRun)
    return found


async def test_a_prime_rl_row_whose_index_has_no_token_counts_reads_as_unknown(tmp_path) -> None:
    layout = stream_run(tmp_path / "out")
    session = FollowedRun(layout, follow=False, columns=True)
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.table
        await until(pilot, lambda: table.row_count == 3)
        assert session.rows is not None
        keys = [session.rows.key(row) for row in range(3)]
        assert [table.cell_text(key, "tokens") for key in keys] == ["-", "12", "700"]
        table.set_filter(RowFilter.parse("tokens:<100"))
        await until(pilot, lambda: table.ordered_keys == [keys[1]], "only the row that counted 12")
        (cell,) = compare_store(session.store).tasks.values()
        assert sorted(next(iter(cell.values())).tokens) == [12, 700]
    await session.shutdown()
