"""Trace-level token flags in the real app (run_test): the demo's training rollout,
which trains on one tool result, is marked in the table, found by `flag:`, counted on
its variant's card, and reads the same from a recording before and after it loads."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.polling import until
from tests.support.training_session import KEY, TASK, training_deltas, training_engine, write_training_recording
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.tokens.flags import MISALIGNED, TOOL_TRAINED
from tracewatch.tui.app import TracewatchApp

CLEAN = "trainer/1"


@pytest.fixture(scope="module")
def deltas() -> list[dict]:
    return asyncio.run(training_deltas())


def card_text(app: TracewatchApp) -> str:
    return str(app.cards["trainer"].body.render())


async def test_the_trained_tool_result_is_marked_filtered_and_counted(deltas: list[dict]) -> None:
    engine = training_engine(deltas)
    store = engine.store
    store.add_rollout("trainer", 1, TASK, 0, key=CLEAN)  # queued: nothing trained yet, no flag
    assert store.rollouts[KEY].flags == {TOOL_TRAINED, MISALIGNED}, "a trained tool result has no logprobs for its trained tokens"
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 2)
        assert app.table.cell_text(KEY, "flag").split() == ["tool", "align"]
        assert app.table.cell_text(CLEAN, "flag") == ""
        await until(pilot, lambda: "tool-trained 1" in card_text(app) and "misaligned 1" in card_text(app))
        await pilot.press("slash", *"flag:tool-trained")
        await until(pilot, lambda: app.table.ordered_keys == [KEY])
        await pilot.press("ctrl+u", *"flag:misal")
        await until(pilot, lambda: app.table.ordered_keys == [KEY])
        await pilot.press("ctrl+u", *"flag:bogus")
        hint = app.query_one("#filter-hint")
        await until(pilot, lambda: "flag:bogus matches nothing; flag is one of tool-trained, misaligned" in str(hint.render()))
        assert app.table.row_count == 0


async def test_a_flag_raised_while_the_rollout_runs_reaches_row_and_card(deltas: list[dict]) -> None:
    """The flag is found on the node as it lands: before the trained tool result the
    row is clean, after it the row and the card say so without any other change."""
    first_flagged = next(
        index for index in range(1, len(deltas) + 1) if training_engine(deltas[:index]).store.rollouts[KEY].flags
    )
    engine = training_engine(deltas[: first_flagged - 1])
    store = engine.store
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 1)
        assert app.table.cell_text(KEY, "flag") == "" and "tool-trained" not in card_text(app)
        store.apply_delta(KEY, deltas[first_flagged - 1])
        await until(pilot, lambda: app.table.cell_text(KEY, "flag") != "" and "tool-trained 1" in card_text(app))


async def test_an_opened_recording_flags_the_row_before_and_after_it_loads(deltas: list[dict], tmp_path: Path) -> None:
    path = tmp_path / "training.twrec"
    write_training_recording(path, deltas)
    live = training_engine(deltas).store.rollouts[KEY].flags
    session = OpenedRecording(path)
    assert session.index.rollouts[KEY].facts.flags == live
    unloaded = session.store.rollouts[KEY]
    assert not unloaded.traces and unloaded.flags == live, "from the index, before any record is read"
    assert session.store.stats("trainer").flagged == {TOOL_TRAINED: 1, MISALIGNED: 1}
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 1)
        app.table.select(KEY)
        await until(pilot, lambda: bool(app.store.rollouts[KEY].traces))
        assert app.store.rollouts[KEY].flags == live
        assert app.table.cell_text(KEY, "flag") == "tool align"
        await until(pilot, lambda: "tool-trained 1" in card_text(app))
