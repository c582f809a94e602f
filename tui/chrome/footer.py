"""The footer: Textual's, whose keys are shown and hidden rather than rebuilt.

Textual's `Footer` unmounts and mounts every key on each bindings signal. Focus moving
between the table and the filter sends two (the filter hides the printable keys): a
rebuild on each `/` or Escape is slow, and the cleared filter waits on it to reach the
screen (docs/performance.md). Here a key the footer has drawn is hidden or shown again
in place; only a key it never drew rebuilds it, and a rebuild already on its way (it
reads the bindings as they are when it runs) is not asked twice: at start two signals
come before the first rebuild runs, and the keys would be built twice.

Below `COMPACT_BELOW` columns the keys drop their padding, so an 80-column terminal
shows every one of the table's. A focused view brings keys of its own (Compare's, the
timeline's) ahead of them: what does not fit before the palette's key (docked right,
over the rest) is folded from the end, and a `…` says so, where it used to slide under
the palette's key, cut with no sign. Help (`?`) lists every key.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey, FooterLabel

COMPACT_BELOW = 100
"""The live screen's keys and the palette's take 88 columns spaced, 79 compact."""


class SteadyFooter(Footer):
    _rebuild_queued = False

    def compose(self) -> ComposeResult:
        yield from super().compose()
        mark = FooterLabel("…", classes="-folded")
        mark.display = False
        yield mark

    def on_resize(self, event: events.Resize) -> None:
        self.compact = event.size.width < COMPACT_BELOW  # each key restyles in place
        self.call_after_refresh(self._fold)

    def bindings_changed(self, screen: Screen[object]) -> None:
        live = bool(screen.app.app_focus and self.is_attached and screen is self.screen)
        if self._bindings_ready and live:
            drawn = {(key.key, key.action, key.description): key for key in self.query_children(FooterKey)}
            shown = self._keys_shown(screen)
            if drawn and shown.keys() <= drawn.keys():
                for identity, key in drawn.items():
                    key.display = identity in shown
                    if identity in shown:
                        enabled = shown[identity]
                        key._disabled = not enabled
                        key.set_class(not enabled, "-disabled")
                self._fold()
                return
        if self._rebuild_queued:
            return
        super().bindings_changed(screen)
        self._rebuild_queued = live

    async def recompose(self) -> None:
        await super().recompose()
        self._rebuild_queued = False
        # bindings that changed while the keys were rebuilt were not looked at (a look
        # then saw no keys and would queue a second rebuild): look once, built
        self.bindings_changed(self.screen)
        self.call_after_refresh(self._fold)

    def _fold(self) -> None:
        """Show the keys that fit before the palette's key, in order, and the `…` if
        any is left off (its room taken from theirs)."""
        keys = [key for key in self.query_children(FooterKey) if not key.has_class("-command-palette")]
        shown = self._keys_shown(self.screen)
        wanted = [key for key in keys if (key.key, key.action, key.description) in shown]
        room = self.size.width - sum(_width(key) for key in self.query_children(FooterKey) if key.has_class("-command-palette"))
        marks = list(self.query_children(".-folded"))
        if sum(map(_width, wanted)) > room:
            room -= sum(map(_width, marks))
        fits = True
        for key in wanted:  # folded from the end: a key after one left off is left off
            room -= _width(key)
            fits = fits and room >= 0
            key.display = fits
        for mark in marks:
            mark.display = not fits

    def _keys_shown(self, screen: Screen[object]) -> dict[tuple[str, str, str], bool]:
        """The keys `compose` would draw now, each with whether it is enabled."""
        palette = self.app.COMMAND_PALETTE_BINDING if self.show_command_palette else None
        shown: dict[tuple[str, str, str], bool] = {}
        for key, (_node, binding, enabled, _tooltip) in screen.active_bindings.items():
            if binding.show or key == palette:
                shown.setdefault((binding.key, binding.action, binding.description), enabled)
        return shown


def _width(widget: Widget) -> int:
    """The cells `widget` takes in the footer's row, laid out or not (a folded key is not)."""
    styles = widget.styles
    return cell_len(widget.render().plain if isinstance(widget, FooterKey) else str(widget.render())) + styles.gutter.width + styles.margin.width
