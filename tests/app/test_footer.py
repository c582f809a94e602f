"""The footer hides and shows its keys in place: focus moving between the table and the
filter hides the printable keys and brings them back, the same key widgets throughout;
a focused widget that brings a shown key of its own still gets it into the footer, and
takes it away on leaving."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Input, Static
from textual.widgets._footer import FooterKey

from tests.support.polling import until
from tests.support.tui_standin import make_engine, write_recording
from tracewatch.core.engine.replay import ReplaySession
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.chrome.footer import SteadyFooter


def footer_labels(app: App) -> list[str]:
    """The keys on screen, left to right."""
    return [key.description for key in app.query(FooterKey) if key.display]


LIVE_KEYS = ["Help", "Quit", "Filter", "Start", "Stop var", "Cancel", "Export"]
"""A live session's footer, once the table has focus (the palette's key aside)."""


async def test_opening_and_clearing_the_filter_keeps_the_footer() -> None:
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(120, 40)) as pilot:
        # the first keys drawn may be rebuilt once the table's focus brings its own
        await until(pilot, lambda: footer_labels(app)[:-1] == LIVE_KEYS, "the live footer drawn")
        keys, labels = list(app.query(FooterKey)), footer_labels(app)
        await pilot.press("/", "a")
        await until(pilot, lambda: app.query_one("#filter", Input).value == "a")
        await until(pilot, lambda: "Quit" not in footer_labels(app), what="q types into the filter")
        assert "Filter" in footer_labels(app)
        await pilot.press("escape")
        await until(pilot, lambda: footer_labels(app) == labels, what="every key back")
        assert list(app.query(FooterKey)) == keys
        assert all(key.is_attached for key in keys)


class Shouting(Static, can_focus=True):
    BINDINGS = [Binding("z", "shout", "Shout")]


class Two(App[None]):
    BINDINGS = [Binding("q", "quit", "Quit")]

    def compose(self) -> ComposeResult:
        yield Static("quiet", id="quiet")
        yield Shouting("loud", id="loud")
        yield Input(id="field")
        yield SteadyFooter()


async def test_a_focused_widgets_own_key_comes_and_goes() -> None:
    app = Two()
    async with app.run_test() as pilot:
        app.query_one("#field").focus()  # q types into the field: only the palette's key
        await until(pilot, lambda: footer_labels(app) == ["palette"])
        app.query_one("#loud").focus()
        await until(pilot, lambda: footer_labels(app) == ["Shout", "Quit", "palette"])
        app.query_one("#field").focus()
        await until(pilot, lambda: footer_labels(app) == ["palette"])


def replay(tmp_path: Path) -> ReplaySession:
    path = tmp_path / "session.twrec"
    write_recording(path)
    return ReplaySession(path, speed=0)


@pytest.mark.parametrize(
    "session, labels",
    [
        (lambda _: make_engine(), LIVE_KEYS),
        # a replay cannot start or cancel: its own keys take their room
        (replay, ["Help", "Quit", "Filter", "Export", "Pause", "Step", "Seek"]),
    ],
    ids=["live", "replay"],
)
async def test_every_footer_key_shows_whole_at_80x24(tmp_path: Path, session, labels: list[str]) -> None:
    """Each key ends before the palette's (docked right) begins, and that one ends on
    the screen: none is cut or hidden under another."""
    app = TracewatchApp(session(tmp_path))

    def whole() -> bool:
        """The expected keys, each label whole, all before the palette's key, and that
        one on the screen."""
        keys = [key for key in app.query(FooterKey) if key.display]
        palette = [key for key in keys if key.has_class("-command-palette")]
        others = [key for key in keys if key not in palette]
        return (
            [key.description for key in others] == labels
            and len(palette) == 1
            and all(key.region.width >= len(key.render().plain) for key in keys)
            and max(key.region.right for key in others) <= palette[0].region.x
            and palette[0].region.right <= 80
        )

    async with app.run_test(size=(80, 24)) as pilot:
        # the keys arrive and are laid out over several refreshes, and a loaded machine
        # can be looked at between them: what must hold is the footer it settles on
        await until(pilot, whole, "every key whole, before the palette's")


@pytest.mark.parametrize("width", [40, 60, 80])
async def test_the_palette_key_covers_the_footers_right_edge(width: int) -> None:
    """The palette's key is docked over the others: nothing of a key behind it may show
    at the edge (at 40 columns `^p Command palette` was followed by Stop var's `a`)."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(width, 12)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        footer = app.query_one(SteadyFooter)
        palette = await until(pilot, lambda: next((key for key in app.query(FooterKey) if key.has_class("-command-palette")), None))
        edge = footer.region.right - 1
        widget, _ = app.screen.get_widget_at(edge, footer.region.y)
        assert widget is palette or widget is footer, f"{widget} shows at the footer's last cell"


def footer_problem(app: TracewatchApp) -> str | None:
    """What is wrong with the footer now, if anything: a key cut or under the palette's,
    or keys the focus brings neither shown nor folded under a visible `…`."""
    footer = app.query_one(SteadyFooter)
    keys = [key for key in app.query(FooterKey) if key.display]
    palette = next((key for key in keys if key.has_class("-command-palette")), None)
    if palette is None:
        return "no palette key"
    others = [key for key in keys if key is not palette]
    edge = max((key.region.right for key in others), default=0)
    cut = [key.description for key in keys if key.region.width < len(key.render().plain)]
    if cut or edge > palette.region.x or palette.region.right > footer.region.right:
        return f"cut {cut} or under the palette's key: {[(key.description, key.region.x, key.region.right) for key in keys]}"
    wanted = {binding.description for _node, binding, _enabled, _tip in app.screen.active_bindings.values() if binding.show}
    missing = wanted - {key.description for key in keys}
    folded = [label for label in footer.query(".-folded") if label.display and label.region.x >= edge and label.region.right <= palette.region.x]
    if missing and not folded:
        return f"{sorted(missing)} left off without a sign"
    return None


async def test_every_tabs_footer_shows_its_keys_or_folds_them_visibly_at_80x24() -> None:
    """On the Compare tab its own key pushed Cancel and Export under the palette's key:
    cut, with nothing to say so. The timeline's three keys did the same."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        focus = {"1": lambda: app.trace_pane.transcript, "5": lambda: app.timeline}
        for tab in "123456":
            await pilot.press(tab)
            if tab in focus:
                focus[tab]().focus()
            await until(pilot, lambda: footer_problem(app) is None, lambda: f"focus {app.focused}: {footer_problem(app)}")
