"""The parts of Textual's private API that tui/drawing/virtual_size.py and tui/chrome/footer.py rely on.

pyproject.toml bounds textual to the minor release these were proven on; a Textual that
renames or reshapes one of them fails here, naming it, rather than as a footer or a
scrolled view that silently misbehaves."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from textual.app import App
from textual.binding import ActiveBinding
from textual.css.styles import Styles
from textual.reactive import Reactive
from textual.scroll_view import ScrollView
from textual.widget import Widget
from textual.widgets import Footer


def parameters(function: Callable[..., object]) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_a_scrolled_view_can_be_told_its_content_size_without_a_layout() -> None:
    """tui/drawing/virtual_size.py: set the reactive quietly, clear the scrollbar memo, update the scrollbars."""
    assert isinstance(Widget.__dict__["virtual_size"], Reactive), "Widget.virtual_size is no longer a reactive"
    assert parameters(Widget.set_reactive) == ["self", "reactive", "value"]
    view = ScrollView()
    assert isinstance(view._scrollbar_changes, set), "Widget._scrollbar_changes is no longer a set"
    assert parameters(ScrollView._scroll_update) == ["self", "virtual_size"], "Widget._scroll_update(virtual_size) changed"
    assert isinstance(Styles.auto_dimensions, property), "Styles.auto_dimensions is gone"
    assert hasattr(view, "container_size")


def test_the_footer_keys_can_be_shown_and_hidden_in_place() -> None:
    """tui/chrome/footer.py: the footer's key widgets, its rebuild hooks and the screen's active bindings."""
    # a private module: imported here so that its move fails this test, not the whole file
    from textual.widgets._footer import FooterKey

    assert parameters(FooterKey.__init__)[:6] == ["self", "key", "key_display", "description", "action", "disabled"]
    key = FooterKey("q", "q", "Quit", "quit", disabled=True)
    assert (key.key, key.action, key.description, key._disabled) == ("q", "quit", "Quit", True)
    for name in ("_bindings_ready", "compact", "show_command_palette"):
        assert isinstance(Footer.__dict__.get(name), Reactive), f"Footer.{name} is no longer a reactive"
    assert parameters(Footer.bindings_changed) == ["self", "screen"]
    assert inspect.iscoroutinefunction(Footer.recompose)
    assert ActiveBinding._fields == ("node", "binding", "enabled", "tooltip"), "Screen.active_bindings' values changed shape"
    assert isinstance(App.COMMAND_PALETTE_BINDING, str)
