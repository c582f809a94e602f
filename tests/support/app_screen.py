"""Reading and steering the real app in tests: its table, a selected row, what the
screen shows as text, its notifications, and the side-by-side screen the Compare tab opens."""

from __future__ import annotations

import html
from typing import Any

from rich.text import Text
from textual.pilot import Pilot

from tests.support.polling import until, while_moving
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views.compare_view import CompareView
from tracewatch.tui.run_views.side_by_side import Side, SideBySideScreen
from tracewatch.tui.run_views.variants_panel import VariantCard
from tracewatch.tui.table.rollouts_table import RolloutsTable


def table(app: TracewatchApp) -> RolloutsTable:
    return app.query_one(RolloutsTable)


async def select(pilot: Pilot, key: str) -> None:
    """Select a row and wait for the trace pane to show it (it follows the cursor's
    repaint)."""
    app = pilot.app
    table(app).select(key)
    await until(pilot, lambda: app.selected == key and app.trace_pane.rollout is app.store.rollouts[key])


def card_text(card: VariantCard) -> str:
    rendered = card.body.render()
    return rendered.plain if isinstance(rendered, Text) else str(rendered)


def svg_text(markup: str) -> str:
    """The SVG's text as the screen shows it: its entities (`&lt;`, `&amp;`) read back."""
    return html.unescape(markup.replace("&#160;", " "))


def screen_text(app: TracewatchApp) -> str:
    """What the screen shows now, as text."""
    return svg_text(app.export_screenshot())


def notices(app: TracewatchApp) -> list[str]:
    """The notifications on screen (title and message), for an app run with
    `notifications=True`."""
    return [str(toast.render()) for toast in app.screen.query("Toast")]


def told(app: TracewatchApp) -> list[str]:
    """From now on, every notice the app gives (title and message, as its toast shows
    them), as it gives it: a toast lasts a few seconds (two for some), which a loaded
    machine may spend before a look at the screen finds it."""
    given: list[str] = []
    notify = app.notify

    def recording(message: str, **options: Any) -> None:
        title = options.get("title", "")
        given.append(f"{title}\n{message}" if title else message)
        notify(message, **options)

    app.notify = recording  # type: ignore[method-assign]
    return given


async def open_side_by_side(app: TracewatchApp, pilot: Any, rows: int, *keys: str) -> tuple[CompareView, SideBySideScreen, Side, Side]:
    """Once the table holds `rows`, the Compare tab focused, `keys` pressed there,
    then the side-by-side screen they open and its two sides."""
    await until(pilot, lambda: app.table.row_count == rows)
    await pilot.press("4")
    view = app.query_one(CompareView)
    await until(pilot, lambda: view.region.height > 1)
    view.focus()
    await pilot.press(*keys)
    screen = await until(pilot, lambda: isinstance(app.screen, SideBySideScreen) and app.screen)
    left, right = screen.query(Side)
    return view, screen, left, right


async def more_ticks(app: TracewatchApp, pilot: Any, count: int, what: str) -> None:
    """`count` more of the app's ticks (30 a second when idle, so 40 outlast its
    once-a-second work). A loaded machine skips late ones, so the deadline is for
    progress: each MARGIN must bring a tick."""
    start = app._ticks
    await while_moving(lambda: app._ticks >= start + count, lambda: app._ticks, lambda: f"{what}: {app._ticks - start} of {count} ticks", pilot.pause)
