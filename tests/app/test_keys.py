"""One table of keys (`tracewatch.tui.chrome.keys.KEYS`) behind the bindings, the command palette, the
help screen and docs/keys.md; each checked against it here."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from tests.support.polling import until
from tests.support.repo import REPO
from tests.support.tui_standin import make_engine
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.chrome import keys_doc
from tracewatch.tui.chrome.keys import KEYS, WHERE
from tracewatch.tui.chrome.screens import HelpScreen
from tracewatch.tui.run_views.compare_view import CompareView
from tracewatch.tui.run_views.metrics_view import MetricsView
from tracewatch.tui.run_views.side_by_side import SideBySideScreen
from tracewatch.tui.run_views.timeline_view import TimelineView
from tracewatch.tui.table.rollouts_table import RolloutsTable
from tracewatch.tui.tokens.token_lines import TokenLines
from tracewatch.tui.trace.transcript import Transcript

KEYS_PAGE = REPO / "docs" / "keys.md"
WIDGETS = {
    "app": TracewatchApp,
    "replay": TracewatchApp,
    "table": RolloutsTable,
    "transcript": Transcript,
    "compare": CompareView,
    "sides": SideBySideScreen,
    "tokens": TokenLines,
    "timeline": TimelineView,
    "metrics": MetricsView,
}


def bound(widget: type) -> set[tuple[str, str]]:
    return {(key, binding.action) for binding in widget.BINDINGS for key in binding.key.split(",")}


def test_every_key_is_bound_where_the_table_says() -> None:
    for key in KEYS:
        if key.action == "command_palette":
            continue  # Textual's own binding
        for name in key.keys.split(","):
            assert (name, key.action) in bound(WIDGETS[key.where]), f"{key.shown} is not bound to {key.action}"


def test_every_binding_is_in_the_table() -> None:
    listed = {(name, key.action) for key in KEYS for name in key.keys.split(",")}
    for where in ("app", "transcript", "table", "compare", "timeline", "metrics", "sides", "tokens"):
        missing = bound(WIDGETS[where]) - listed
        assert not missing, f"{where} binds keys the help does not list: {missing}"


def test_the_keys_page_is_generated_from_the_key_table() -> None:
    assert KEYS_PAGE.read_text() == keys_doc.render(), "docs/keys.md is stale: run `python -m tracewatch.tui.chrome.keys_doc > docs/keys.md`"


def test_the_keys_page_lists_every_key_under_its_place() -> None:
    page = KEYS_PAGE.read_text()
    for where, heading in WHERE.items():
        section = page.partition(f"## {heading}\n")[2].partition("\n## ")[0]
        for key in KEYS:
            if key.where == where:
                assert f"| `{key.shown}` | {key.local_help} |" in section, f"{key.shown} missing under {heading}"


@pytest.mark.parametrize("width", [80, 160])
async def test_help_lists_every_key_and_fits_the_terminal(width: int) -> None:
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(width, 60)) as pilot:
        await pilot.press("question_mark")
        screen = await until(pilot, lambda: isinstance(app.screen, HelpScreen) and app.screen)
        text = str(screen.query_one(Static).render())
        for key in KEYS:
            assert f"{key.shown}  {key.local_help}" in text
        dialog = screen.query_one("#help")
        assert dialog.size.width <= width
        assert dialog.outer_size.width >= min(width - 4, 100)
