"""One card per variant: lifecycle state, server pid and uptime, rollout counts, mean
reward, Start/Cancel, and a cancel's escalation and outcome as they happen."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, HorizontalScroll, Vertical
from textual.message import Message
from textual.widgets import Button, Static

from tracewatch.core.run.durations import clock
from tracewatch.core.session.contracts import StoreView, VariantState, VariantView
from tracewatch.core.session.status import Status
from tracewatch.core.tokens.flags import FLAGS
from tracewatch.tui.drawing.literal import safe
from tracewatch.tui.drawing.palette import Palette
from tracewatch.tui.run_views.trends_view import card_trends

_STEP = {"cancel-runs": "cancel sent to runs", "sigterm": "SIGTERM sent", "sigkill": "SIGKILL sent"}
"""A step's short label on the card; its full detail goes to the card's tooltip, so the
grace left (what the user acts on) is never cut off the card's last line."""
SPARKLINE = 12
"""Cells of each trend on a card, beside its name: the run so far, finished per minute
and the rolling mean reward."""
_STATE_LOOK = {"idle": "boot", "starting": "setup", "running": "scoring", "draining": "scoring"}
"""A state's colour, named by the phase that shares it (see `Palette`)."""


class VariantCard(Horizontal, can_focus=True):
    """A variant at a glance; focus it to make `s`/`x` act on it."""

    class Focused(Message):
        """The card gained or lost focus: it redraws its marker."""

        def __init__(self, card: VariantCard) -> None:
            super().__init__()
            self.card = card

        @property
        def control(self) -> VariantCard:
            return self.card

    class Requested(Message):
        """Start or Cancel pressed on a card; the app decides (confirm, read-only)."""

        def __init__(self, name: str, action: str) -> None:
            super().__init__()
            self.name = name
            self.action = action

    def __init__(self, variant: VariantView, store: StoreView, readonly: bool) -> None:
        super().__init__(classes="variant-card")
        self.variant = variant
        self.store = store
        self.readonly = readonly
        self.differs: set[str] = set()
        self._drawn: tuple[float, Palette] | None = None
        """What differs between this variant and another (model, sampling keys)."""
        # Held rather than queried: a redraw may come before compose or after teardown.
        self.body = Static(markup=False, classes="card-body")
        self.start = Button("Start", variant="success", compact=True, classes="start")
        self.cancel = Button("Cancel", variant="error", compact=True, classes="cancel")

    @property
    def variant_name(self) -> str:
        return self.variant.name

    def compose(self) -> ComposeResult:
        """No buttons in a read-only session: nothing there can start or be cancelled
        (the status line says why), and the card keeps their columns."""
        yield self.body
        if not self.readonly:
            with Vertical(classes="card-buttons"):
                yield self.start
                yield self.cancel

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.Requested(self.variant.name, "start" if event.button is self.start else "cancel"))

    def on_resize(self) -> None:
        """A narrow card shows fewer escalation steps: redraw it for its width."""
        if self._drawn is not None:
            self.redraw(*self._drawn)

    def redraw(self, now: float, palette: Palette) -> None:
        self._drawn = (now, palette)
        variant = self.variant
        for state in VariantState:
            self.set_class(state is variant.state, f"-{state.value}")
        self.body.update(self._body(now, palette), layout=False)  # its height is the card's
        start, cancel = self.start, self.cancel
        start.disabled = not variant.can_start
        cancel.disabled = not variant.can_cancel
        cancel.tooltip = variant.cancel_unavailable
        cancel.label = "Kill" if variant.state is VariantState.CANCELLING else "Cancel"

    def _body(self, now: float, palette: Palette) -> Text:
        """Four rows: name and state; server, model and sampling; counts; the cancel's
        escalation, the failure or the mean reward. A two-row card (80x24) keeps the
        first two and puts the escalation or failure in place of the counts."""
        variant = self.variant
        state = variant.state
        style = palette.phase(_STATE_LOOK.get(state, state.value))
        head = Text(no_wrap=True, overflow="ellipsis", end="")
        if self.has_focus:  # a glyph, not only a shade: `s` and `x` act on this card
            head.append("▶ ", style="bold reverse")
        head.append(safe(variant.name), style="bold reverse" if self.has_focus else "bold")
        head.append("  ")
        head.append(state.value, style=style)
        if state is VariantState.STARTING and variant.health_left is not None:
            head.append(f" · health {variant.health_left:.0f}s", style=palette.muted)
        server = Text(f"pid {variant.pid}" if variant.pid is not None else safe(variant.address or "no server"))
        if variant.server_started_at is not None and state in (VariantState.RUNNING, VariantState.DRAINING, VariantState.CANCELLING):
            server.append(f" · up {clock(now - variant.server_started_at)}", style=palette.muted)
        self._describe(server)
        run = self.store.latest_run(variant.name)
        stats = self.store.stats(variant.name, run=run)  # this start's, not every start's summed
        detail = self._detail(now, palette)
        counts = Text()
        if self.store.partial is not None:  # the index reads on: every count here grows
            counts.append("so far: ", style=palette.warning)
        if run > 1:
            counts.append(f"start {run}: ", style="bold")
        tally = stats.counts
        counts.append(f"run {tally[Status.RUNNING] + tally[Status.CANCELLING]}")
        counts.append(f"  done {tally[Status.DONE]}", style=palette.success)
        counts.append(f"  fail {tally[Status.FAILED]}", style=palette.error if tally[Status.FAILED] else "")
        counts.append(f"  cxl {tally[Status.CANCELLED]}")
        for flag in FLAGS:
            if stats.flagged.get(flag):
                counts.append(f"  {flag} {stats.flagged[flag]}", style=palette.warning)
        reward = Text(f"mean reward {stats.mean_reward:.2f}", style="bold") if stats.mean_reward is not None else None
        height = self.styles.height  # the CSS's, not the laid-out size: known before the first frame
        if height is not None and height.cells is not None and height.cells < 4:
            # beside the name, the pid alone: its uptime and model would cut the pid's digits
            pid = Text(f"pid {variant.pid}") if variant.pid is not None else server
            rows = [Text(" · ").join([head, pid]), detail or Text(" · ").join([counts, *([reward] if reward else [])])]
        elif detail is not None:
            # the reward beside the counts, not after the server's model and sampling,
            # which cut it to "mean reward 0…"
            rows = [head, server, Text(" · ").join([counts, *([reward] if reward else [])]), detail]
        else:
            last = Text(" · ").join([reward, Text(f"{stats.scored} scored{' so far' if self.store.partial is not None else ''}", style=palette.muted)]) if reward else Text()
            rows = [head, server, counts, last]
        if len(rows) == 4:
            head.append_text(card_trends(self.store, variant.name, SPARKLINE, palette))
        text = Text("\n", no_wrap=True, overflow="ellipsis", end="").join(rows)
        return text

    def _describe(self, text: Text) -> None:
        """The model and sampling; what differs from another card is bold, so two
        variants read apart at a glance."""
        variant = self.variant
        parts = [("model", variant.model)] if variant.model else []
        parts += sorted((key, value) for key, value in variant.sampling.items())
        for key, value in parts:
            shown = safe(str(value)) if key == "model" else f"{safe(key)}={safe(str(value))}"
            text.append(" · ")
            text.append(shown, style="bold" if key in self.differs else "")

    def on_focus(self) -> None:
        self.post_message(self.Focused(self))

    def on_blur(self) -> None:
        self.post_message(self.Focused(self))

    def _detail(self, now: float, palette: Palette) -> Text | None:
        """The cancel escalation while it runs, then its outcome; or why it failed."""
        variant = self.variant
        if variant.outcome_text:  # how it exited, and why in its own words (its stderr's tail)
            words = f"{variant.outcome_text} · {variant.reason}" if variant.reason else variant.outcome_text
            return Text(safe(words), style=palette.warning)
        if variant.escalation:
            self.tooltip = "\n".join(
                _STEP.get(e.kind, e.kind) + (f": {safe(e.detail)}" if e.detail else "") for e in variant.escalation
            )
            steps = [_STEP.get(e.kind, safe(e.kind)) for e in variant.escalation]
            shown = steps if self.size.width >= 50 else steps[-1:]
            text = Text(" → ".join(shown), style=palette.warning)
            grace = variant.grace_left(now)
            if grace is not None:
                text.append(f" · grace {grace:.0f}s left", style="bold")
            return text
        if variant.reason:
            return Text(safe(variant.reason), style=palette.error)
        if variant.status_line:
            return Text(safe(variant.status_line), style=palette.muted)
        return None


CARD_WIDTH = (22, 34)
"""A card's narrowest and its widest minimum: cards share a narrow strip down to the
first (a 60-column terminal shows two), and only then does the strip scroll."""


class VariantsPanel(HorizontalScroll):
    """The strip of cards; cards are keyed by variant name."""

    def __init__(self, *cards: VariantCard, id: str | None = None) -> None:
        """`cards` are composed with the strip, so they are on the first frame."""
        super().__init__(*cards, id=id)
        self.cards: dict[str, VariantCard] = {card.variant_name: card for card in cards}
        self.compare()

    def add_card(self, card: VariantCard) -> None:
        self.cards[card.variant_name] = card
        self.mount(card)
        self.compare()
        self._share_width()

    def on_mount(self) -> None:
        self._share_width()

    def on_resize(self) -> None:
        self._share_width()

    def _share_width(self) -> None:
        """Each card's minimum width: its share of the strip (a cell between cards),
        within `CARD_WIDTH`, so no card is pushed off a narrow screen while there is room.
        Before its first layout the strip is as wide as the screen (it spans it)."""
        count = len(self.cards)
        width = self.size.width or self.app.size.width
        if not count or not width:
            return
        share = (width - (count - 1)) // count
        least = max(CARD_WIDTH[0], min(CARD_WIDTH[1], share))
        for card in self.cards.values():
            card.styles.min_width = least

    def compare(self) -> None:
        """Tell each card what differs between the variants: the model, sampling keys."""
        described = [{"model": c.variant.model, **c.variant.sampling} for c in self.cards.values()]
        keys = {key for d in described for key in d}
        differs = {key for key in keys if len({repr(d.get(key)) for d in described}) > 1}
        for card in self.cards.values():
            card.differs = differs
