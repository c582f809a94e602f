"""Every size of terminal: at 60x20 the rows can still be told apart and every
variant's card is on screen."""

from __future__ import annotations

from tests.support.polling import until
from tests.support.tui_standin import make_engine
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
