"""The tail of a variant's server stdout/stderr capture, read in a worker thread (the
file reads never block the loop), with how much arrived while the tab was hidden."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Log, Select

from core.session.contracts import VariantView
from tui.format import safe, size_text

TAIL_LINES = 300


class LogsView(Vertical):
    class Unread(Message):
        """The unread count changed: the app relabels the tab."""

    def __init__(self, variants: Mapping[str, VariantView], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.variants = variants
        self.unread = 0
        """Bytes written to every capture since the tab was last visible."""
        self._seen: dict[str, int] = {}
        self._tail_size: int | None = None
        self._visible = False

    def compose(self) -> ComposeResult:
        names = list(self.variants)
        # held, not queried: the reader's answer may land while they are being removed
        self._select: Select[str] = Select(
            [(safe(name), name) for name in names],
            value=names[0] if names else Select.NULL,
            allow_blank=not names,
            prompt="variant",
            compact=True,
            id="log-variant",
        )
        self._log = Log(max_lines=TAIL_LINES * 2, id="log-lines")
        yield self._select
        yield self._log

    def variants_changed(self) -> None:
        """Variants that appeared since (a replay meets them as it plays) join the list;
        the first is shown if none was."""
        select = self._select
        if not select.is_attached:
            return
        shown = self.shown
        names = list(self.variants)
        select.set_options([(safe(name), name) for name in names])
        if names:
            select.value = shown if shown is not None and shown in self.variants else names[0]

    @property
    def shown(self) -> str | None:
        value = self._select.value
        return value if isinstance(value, str) else None

    @on(Select.Changed)
    def _variant_changed(self) -> None:
        self._tail_size = None
        self.poll(self._visible)

    def poll(self, visible: bool) -> None:
        self._visible = visible
        if self._log.is_attached:
            self._read(visible, self.shown)

    @work(thread=True, exclusive=True, group="logs")
    def _read(self, visible: bool, shown: str | None) -> None:
        sizes, tail = {}, None
        for name, variant in self.variants.items():
            try:
                sizes[name] = variant.log_size()
            except OSError:
                sizes[name] = 0
        if visible and shown is not None and sizes.get(shown) != self._tail_size:
            try:
                tail = self.variants[shown].log_tail(TAIL_LINES) or [f"({shown}'s server has written nothing yet)"]
            except OSError as error:
                tail = [f"cannot read the capture of {shown}: {error}"]
        with contextlib.suppress(RuntimeError):  # the app stopped while the files were read
            self.app.call_from_thread(self._apply, sizes, shown, tail, visible)

    def _apply(self, sizes: dict[str, int], shown: str | None, tail: list[str] | None, visible: bool) -> None:
        if visible:
            self._seen = sizes
        unread = sum(max(0, size - self._seen.get(name, 0)) for name, size in sizes.items())
        if unread != self.unread:
            self.unread = unread
            self.post_message(self.Unread())
        log = self._log
        if tail is not None and shown is not None and shown == self.shown and log.is_attached:
            self._tail_size = sizes.get(shown)
            log.clear()
            log.write_lines(safe(line) for line in tail)

    def label(self) -> str:
        return f"Logs ({size_text(self.unread)} new)" if self.unread else "Logs"
