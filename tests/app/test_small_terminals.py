"""Every size of terminal: at 60x20 the rows can still be told apart and every
variant's card is on screen."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.app_screen import screen_text
from tests.support.polling import until
from tests.support.tui_standin import T0, make_engine
from tracewatch.core.session.contracts import VariantState
from tracewatch.tui.app import TracewatchApp


async def test_at_60_columns_the_columns_that_tell_rows_apart_stay() -> None:
    """Task, variant and # tell one row from another; the others give way first."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(60, 20)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        shown = app.table.columns_shown
        assert {"variant", "task", "number"} <= set(shown), shown
        assert {"phase", "reward"} <= set(shown), "what a row says comes next"
        rows = {tuple(app.table.cell_text(key, column) for column in shown) for key in app.store.rollouts}
        assert len(rows) == 14, "no two rows read the same"


async def test_at_60_columns_every_card_is_on_screen() -> None:
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(60, 20)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14 and len(app.cards) == 2)
        await pilot.pause()
        for name, card in app.cards.items():
            assert card.region.width >= 20 and card.region.right <= 60, f"{name}'s card is at {card.region}"
            assert str(card.body.render()).startswith(name)


@pytest.mark.parametrize("width, shown", [(60, False), (160, True)])
async def test_a_recording_that_does_not_fit_the_status_line_is_left_off_it(tmp_path: Path, width: int, shown: bool) -> None:
    """At 60 columns the recording's name does not fit beside the counts: the line
    does not end in a bare "rec…"; at 160 it reads whole."""
    engine = make_engine()
    engine.recording_path = tmp_path / "2026-12-07T12-00-00-1234.twrec"
    app = TracewatchApp(engine, title="tracewatch demo")
    async with app.run_test(size=(width, 20)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        line = await until(pilot, lambda: (text := str(app.status.render())).startswith("tracewatch demo  14 rollouts") and text)
        after = line.split("running", 1)[1]
        assert after == f"  rec {engine.recording_path}" if shown else "rec" not in after, line


async def test_at_160_columns_a_stalled_rollouts_activity_is_whole() -> None:
    """A table wider than its columns gives the room to Activity and Task: the stalled
    rows' "⚠ 1:35 generating" is not cut beside blank columns."""
    now = [T0]
    engine = make_engine(finish=False, clock=lambda: now[0])
    now[0] += 95  # past the stall threshold (60 s) since each rollout's last delta
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        stalled = [key for key, rollout in engine.store.rollouts.items() if engine.store.is_stalled(rollout, now[0])]
        assert stalled
        cells = {key: app.table.cell_text(key, "activity") for key in stalled}
        assert all(cell.startswith("⚠ 1:") for cell in cells.values()) and any(len(cell) > 16 for cell in cells.values()), cells
        await until(pilot, lambda: all(cell in screen_text(app) for cell in cells.values()), f"every stalled row's {set(cells.values())} whole on screen")


@pytest.mark.parametrize("size", [(120, 40), (160, 48)])
async def test_a_stopped_cards_mean_reward_is_whole(size: tuple[int, int]) -> None:
    """A card with its stop's outcome below keeps its mean reward on the counts' row,
    not after the server's model and sampling, where it read "mean reward 0…"."""
    engine = make_engine()
    for variant in engine.variants.values():
        variant.state, variant.outcome_text = VariantState.CANCELLED, "cancelled: exited 0 after SIGTERM"
        variant.sampling = {"temperature": 0.2, "top_p": 0.95, "max_tokens": 4096, "seed": 1234}
    app = TracewatchApp(engine)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        await until(pilot, lambda: screen_text(app).count("mean reward 0.80") == 2, "both cards' mean reward whole")


async def test_at_80x24_a_cards_pid_is_whole() -> None:
    engine = make_engine()
    for variant in engine.variants.values():
        variant.pid = 32145  # five digits, as the issue saw ("pid 3214…")
    app = TracewatchApp(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        await until(pilot, lambda: screen_text(app).count("pid 32145") == 2, "both cards' pid whole, not \"pid 3214…\"")
