"""The first frame the terminal gets is the final layout: no provisional screen (the
table across the whole width, no cards, the narrow layout on a wide terminal) for a
user to watch rearrange itself."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.geometry import Region
from textual.screen import Screen

import tracewatch.tui.app
from tests.support.polling import until
from tests.support.tui_standin import make_engine
from tracewatch.tui.app import TracewatchApp

NOW = 1_764_500_000.0
"""A frozen clock: nothing on screen changes by itself once drawn."""


class FirstFrameApp(TracewatchApp):
    """The app, noting what its first frame put on screen: the text and where each part
    of the layout was as it was painted."""

    CSS_PATH = str(Path(tracewatch.tui.app.__file__).with_name("app.tcss"))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.first_text: str | None = None
        self.first_places: dict[str, Region] = {}

    def _display(self, screen: Screen[Any], renderable: Any) -> None:
        if self.first_text is None and renderable is not None and not self._batch_count:
            self.first_text = painted_text(self, screen)
            self.first_places = places(self)
        super()._display(screen, renderable)


def painted_text(app: TracewatchApp, screen: Screen[Any]) -> str:
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(), record=True, color_system=None, legacy_windows=False)
    console.print(screen._compositor.render_update(full=True))
    return console.export_text()


def places(app: TracewatchApp) -> dict[str, Region]:
    """Where the table's rows, the detail tabs and each card are on screen (an empty
    region for one not on it)."""
    visible = app.screen._compositor.visible_widgets
    parts = {"detail": app.detail, **{f"card {name}": card for name, card in app.cards.items()}}
    found = {name: widget.region if widget in visible else Region() for name, widget in parts.items()}
    found["table"] = app.table.scrollable_content_region if app.table in visible else Region()
    return found


def within(text: str, region: Region) -> list[str]:
    return [line[region.x : region.right] for line in text.splitlines()[region.y : region.bottom]]


@pytest.mark.parametrize("size", [(200, 50), (80, 24), (60, 20)])
async def test_the_first_frame_is_the_final_layout(size: tuple[int, int]) -> None:
    """The parts in their final places, and the table and the cards drawn for them
    (the columns a table of that width shows, cards of the rows they have)."""
    app = FirstFrameApp(make_engine(finish=True, clock=lambda: NOW), title="tracewatch demo")
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.first_text is not None, "the first frame")
        await until(pilot, lambda: app.table.row_count == len(app.store.rollouts))
        seen: list[dict[str, Region]] = []

        def still() -> bool:  # the same places over a pause: the layout has settled
            seen.append(places(app))
            return len(seen) > 1 and seen[-1] == seen[-2]

        await until(pilot, still, "the layout to settle")
        settled = seen[-1]
        assert len(settled) == 4 and all(settled.values()), settled
        assert app.first_places == settled, f"first frame:\n{app.first_text}"
        assert app.first_text is not None
        now = painted_text(app, app.screen)
        for name in ("table", *(f"card {name}" for name in app.cards)):
            assert within(app.first_text, settled[name]) == within(now, settled[name]), name
