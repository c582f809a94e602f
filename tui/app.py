"""The Textual app. Talks to `core` only; never imports zmq or subprocess.

Deltas land in the session's store; nothing here reacts to them directly. One tick at
30 Hz takes the store's changed-set and redraws only what changed (rows, cards, the
open transcript, the timing view); a slower second tick advances clocks and logs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.actions import SkipAction
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Vertical, VerticalScroll
from textual.dom import DOMNode
from textual.driver import Driver
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.theme import Theme
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Input, Static, TabbedContent, TabPane

from tracewatch.core.demo import TOKENIZERS as DEMO_TOKENIZERS
from tracewatch.core.run.durations import clock
from tracewatch.core.session.alerts import Alert, AlertSettings, AlertWatch, terminal_notification
from tracewatch.core.session.contracts import ReplayControls, ReplayPosition, SessionView, VariantState, VariantView
from tracewatch.core.session.retention import freeze_startup
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.core.session.status import Status
from tracewatch.core.tokens.tokenizer import Tokenizers
from tracewatch.tui.chrome.footer import SteadyFooter
from tracewatch.tui.chrome.keys import KEYS, bindings, hide_writes
from tracewatch.tui.chrome.screens import ConfirmScreen, HelpScreen, QuitScreen
from tracewatch.tui.drawing.hung_up_terminal import tolerant
from tracewatch.tui.drawing.literal import safe
from tracewatch.tui.drawing.palette import Palette
from tracewatch.tui.run_views.compare_view import CompareView
from tracewatch.tui.run_views.logs_view import LogsView
from tracewatch.tui.run_views.side_by_side import SideBySideScreen
from tracewatch.tui.run_views.timeline_view import TimelineView
from tracewatch.tui.run_views.timing_view import TimingView
from tracewatch.tui.run_views.trends_view import TrendsView
from tracewatch.tui.run_views.variants_panel import VariantCard, VariantsPanel
from tracewatch.tui.table.filter_field import FilterField
from tracewatch.tui.table.rollouts_table import RolloutsTable
from tracewatch.tui.trace.trace_pane import TracePane
from tracewatch.tui.trace.transcript import Transcript

if TYPE_CHECKING:
    from tracewatch.tui.run_views.metrics_view import MetricsView

TICK = 1 / 30
NARROW_STATUS = 140
"""Below this width the status line names the recording by its file name only."""
CARD_EVERY = 4
"""Cards redraw every fourth tick at most: their counts scan the variant's rollouts."""
SETTLE = 0.08
"""A move this soon after the last one waits until the cursor rests this long before
its transcript is laid out: a held arrow key (a move every 30-50 ms) repaints the
cursor on each row but lays out only the last; a single move lays out at once. A move
the filter made waits until the typing rests as long (each keystroke puts it off)."""

FAST_REPLAY_EVERY = 3
"""A replay playing as fast as it can is drawn at every third tick: it moves faster
than it can be read, and each tick's drawing (rows, the followed transcript, the
cards and the status line, whose once-a-second work comes at every tick as the
recorded clock races) took the app's CPU from the replay."""


def home_short(path: Path) -> str:
    """A path with the home folder as `~`: shorter in a toast or a status line."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


class TracewatchApp(App[None]):
    CSS_PATH = "app.tcss"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-medium"), (180, "-wide")]
    BINDINGS = bindings("app", "replay")

    def __init__(
        self, session: SessionView, *, title: str | None = None, tokenizers: Tokenizers | None = None, alerts: AlertSettings | None = None
    ) -> None:
        super().__init__()
        self.session = session
        self.alert_settings = alerts or AlertSettings()
        self.alerts = AlertWatch(session, self.alert_settings.cancel_stalled)
        self.tokenizers = tokenizers or Tokenizers(by_model=DEMO_TOKENIZERS)
        self.store = session.store
        self.title = title or "tracewatch"
        self.selected: str | None = None
        self._settle: Timer | None = None
        self._moved = 0.0
        self._typed = 0.0
        self._ticks = 0
        self._next_second = 0.0
        self._stalled = 0
        """Live rollouts stalled at the last second: a pass over every live one, so
        counted once a second, not at each redraw of the status line."""
        self._dirty_variants: set[str] = set()
        self._timeline_moved = False
        self._partial = False
        """Whether the counts were last drawn as partial ("so far")."""
        self._quitting = False
        self._told_recording_stopped = False
        self._side_variants: list[str] = []
        self.metrics: MetricsView | None = None
        """The run's own metrics in the Trends tab, for a session that has them."""
        """The variants side by side showed last: the next task opens with them."""
        if session.readonly_reason:
            hide_writes(self._bindings)

    # -- layout ------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(markup=False, id="status")
        yield VariantsPanel(*self._cards_for({}), id="variants")
        with Vertical(id="body"):
            with Vertical(id="table-pane"):
                yield FilterField(self._apply_filter, placeholder="filter: variant:NAME status:running phase:agent reward:<1 elapsed:>1m error:TEXT text", id="filter", compact=True, select_on_focus=False)
                yield Static(markup=False, id="filter-hint")
                yield RolloutsTable(self.store, self.store.clock, user_busy=self.session.user_busy, id="rollouts")
            with TabbedContent(id="detail", initial="tab-trace"):
                with TabPane("Trace", id="tab-trace"):
                    yield TracePane(clock=self.store.clock, id="trace")
                with TabPane("Timing", id="tab-timing"):
                    with VerticalScroll(id="timing-scroll"):
                        yield TimingView(self.store, id="timing")
                with TabPane("Logs", id="tab-logs"):
                    yield LogsView(self.session.variants, id="logs")
                with TabPane("Compare", id="tab-compare"):
                    with VerticalScroll(id="compare-scroll", can_focus=False):  # the view's cursor scrolls it
                        yield CompareView(self.store, id="compare")
                with TabPane("Timeline", id="tab-timeline"):
                    yield TimelineView(self.store, id="timeline")
                with TabPane("Trends", id="tab-trends"):
                    metrics = self.session.run_metrics
                    if metrics is not None:
                        from tracewatch.tui.run_views.metrics_view import (
                            MetricsView,  # numpy with it: only for a run that has metrics
                        )

                        yield Input(placeholder="keys: words a key holds (reward kl entropy ...)", id="metrics-filter", compact=True, select_on_focus=False)
                    with VerticalScroll(id="trends-scroll", can_focus=metrics is None):  # else the metrics' focus scrolls it
                        if metrics is not None:
                            self.metrics = MetricsView(metrics, id="metrics")
                            yield self.metrics
                        yield TrendsView(self.store, id="trends")
        yield SteadyFooter()

    async def on_mount(self) -> None:
        # Held, not queried: the tick may still fire while the screen is torn down.
        self.table = self.query_one(RolloutsTable)
        self.trace_pane = self.query_one(TracePane)
        self.timing = self.query_one(TimingView)
        self.logs = self.query_one(LogsView)
        self.detail = self.query_one(TabbedContent)
        self.cards = self.query_one(VariantsPanel).cards
        self.status = self.query_one("#status", Static)
        self.panel = self.query_one(VariantsPanel)
        self.compare = self.query_one(CompareView)
        self.timeline = self.query_one(TimelineView)
        self.trends = self.query_one(TrendsView)
        self._set_palette()
        self._lay_out_for_width()
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        # Started here rather than in a worker, so the rollouts it queues at once are
        # on the first screen (drawn from the next tick, the first row would come a
        # tick and a layout later); a start returns at once (it queues and creates tasks). One that
        # fails leaves the app up to show why.
        try:
            await self.session.start()
        except Exception as error:
            self.notify(f"could not start: {error}", severity="error", timeout=30)
        self._first_draw()
        self.call_after_refresh(freeze_startup)
        self.set_interval(TICK, self._tick)
        self.table.focus()

    def _lay_out_for_width(self) -> None:
        """The screen's width class (`HORIZONTAL_BREAKPOINTS`) set and styled before the
        first frame: Textual sets it as the screen handles its first resize, which comes
        after the first paint, so a wide terminal first showed the narrow layout."""
        width = self.size.width
        chosen = max((edge, name) for edge, name in self.HORIZONTAL_BREAKPOINTS if edge <= width)[1]
        self.screen.set_classes({*(self.screen.classes - {name for _, name in self.HORIZONTAL_BREAKPOINTS}), chosen})
        self.screen.update_node_styles(animate=False)

    def _first_draw(self) -> None:
        """Whatever the store holds before the first screen (what the session queued as
        it started, a replay, an opened run), drawn on it."""
        self.store.take_changes()
        self.table.rebuild()
        self._redraw_cards(self.session.variants)
        self._second()

    def _theme_changed(self, theme: Theme) -> None:
        self._set_palette()
        self._redraw_cards(self.session.variants)

    def _set_palette(self) -> None:
        """One palette for every view that draws with one, read from the table's
        component classes (app.tcss decides the colours). Each class a widget declares
        is styled again at each restyle of it, several before the first screen:
        declared on the timing and compare views too, they would delay the first row
        (docs/performance.md)."""
        self.palette = Palette(self.table)
        self.table.set_palette(self.palette)
        self.timing.palette = self.compare.palette = self.timeline.palette = self.trends.palette = self.palette
        if self.metrics is not None:
            self.metrics.palette = self.palette

    # -- the tick ------------------------------------------------------------------

    def _tick(self) -> None:
        """Read what changed since the last tick and redraw only that; nothing once
        quitting has begun (the quit screen shows the progress, and ending 100,000
        queued rollouts must not cost a redraw of each) or the app is shutting down."""
        if self._quitting or not (self.is_running and self.table.is_attached):
            return
        self._ticks += 1
        if self._ticks % FAST_REPLAY_EVERY and (replay := self.session.replay) is not None and replay.fast:
            return
        changes = self.store.take_changes()
        now = self.store.clock()
        with self.batch_update():
            self.table.sync([*changes.added, *changes.rollouts])
            self.trace_pane.set_hidden(self.table.pinned)
            if changes:
                self._rejudge_filter_hint()
            if self.selected in changes.rollouts:
                self.trace_pane.refresh_trace(changes.traces)
                self._show_timing(now)
            self._dirty_variants |= changes.variants
            if self.detail.active == "tab-compare":
                self.compare.follow()
            elif self.detail.active == "tab-timeline":
                self._timeline_moved |= bool(changes)
                if self._timeline_moved and self._ticks % CARD_EVERY == 0:  # as often as the cards
                    self._timeline_moved = False
                    self.timeline.sync()
            elif self.detail.active == "tab-trends" and self.metrics is not None and self._ticks % CARD_EVERY == 0:
                self.metrics.show()  # rows as they arrive: only when the run's metrics moved
            if now >= self._next_second:
                self._second()
            elif (self.store.partial is not None) != self._partial:  # an index whole at last moves no clock
                self._redraw_cards(self.session.variants)
                self._draw_status()
                if self.detail.active == "tab-trends":
                    self.trends.show()
            elif self._dirty_variants and self._ticks % CARD_EVERY == 0:
                self._redraw_cards(self._dirty_variants)
                self._draw_status()  # its counts are the cards': drawn at the same tick

    def _second(self) -> None:
        """Once a second: clocks (elapsed, activity, uptime, grace), the status line,
        logs, and the waterfall's open spans."""
        now = self.store.clock()
        self._next_second = now + 1.0
        self._stalled = self.store.live_counts(now)[1]
        self.table.tick()
        self._rejudge_filter_hint()
        self._redraw_cards(self.session.variants)
        self._show_timing(now)
        self._draw_status()
        self._tell_recording_stopped()
        self.logs.poll(visible=self.detail.active == "tab-logs")
        for alert in self.alerts.check(now):
            self._alert(alert)
        if self.detail.active == "tab-timeline":
            self.timeline.sync()
        elif self.detail.active == "tab-trends":
            self.trends.show()
            if self.metrics is not None:
                self.metrics.show()

    def _tell_recording_stopped(self) -> None:
        """Once, as an error that stays up: what follows is not recorded, which the
        status line alone would let pass unseen."""
        stopped = self.session.recording_stopped
        if stopped is not None and not self._told_recording_stopped:
            self._told_recording_stopped = True
            self.notify(safe(stopped), title="Recording stopped", severity="error", timeout=60)

    @on(LogsView.Unread)
    def _logs_unread(self) -> None:
        self.detail.get_tab("tab-logs").label = self.logs.label()

    def _alert(self, alert: Alert) -> None:
        """A notification here; the bell and a desktop notification through the terminal
        (OSC 9 or 777) too, if asked for, so a user in another window hears of it."""
        self.notify(safe(alert.message), title=alert.title, severity=alert.severity, timeout=10)
        settings = self.alert_settings
        if settings.bell:
            self.bell()
        if settings.osc is not None and not self.is_headless and self._driver is not None:
            self._driver.write(terminal_notification(alert, settings.osc))

    def _add_cards(self) -> None:
        """A card (and a logs entry) for each variant without one: a replay meets its
        variants as their records arrive."""
        new = self._cards_for(self.cards)
        for card in new:
            self.panel.add_card(card)
        if new:
            self.logs.variants_changed()

    def _cards_for(self, known: Mapping[str, VariantCard]) -> list[VariantCard]:
        """A card for each variant not in `known` (every one, as the screen is composed)."""
        readonly = self.session.readonly_reason is not None
        return [VariantCard(variant, self.store, readonly) for name, variant in self.session.variants.items() if name not in known]

    @on(VariantCard.Focused)
    def _card_focused(self, event: VariantCard.Focused) -> None:
        self._redraw_cards([name for name, card in self.cards.items() if card is event.control])

    def _redraw_cards(self, names: Iterable[str]) -> None:
        now = self.store.clock()
        if len(self.cards) != len(self.session.variants):
            self._add_cards()
        self.panel.compare()
        for name in list(names):
            if name in self.cards:
                self.cards[name].redraw(now, self.palette)
        self._dirty_variants.clear()

    def _show_timing(self, now: float) -> None:
        """Only while its tab is open: each `show` lays the whole screen out again (the
        view's height follows its content), which under load cost a layout every tick."""
        if self.detail.active == "tab-timing":
            self.timing.show(self._rollout(), self.trace_pane.trace_id, now)

    @on(TabbedContent.TabActivated, "#detail")
    def _tab_activated(self) -> None:
        self._show_timing(self.store.clock())
        if self.detail.active == "tab-compare":  # what moved while it was hidden
            self.compare.refresh(layout=True)
        elif self.detail.active == "tab-timeline":
            self.timeline.sync()
            self.timeline.select(self.selected)
        elif self.detail.active == "tab-trends":
            self.trends.show()
            if self.metrics is not None:
                self.metrics.show()

    def _draw_status(self) -> None:
        self._partial = self.store.partial is not None
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        text.append(safe(self.title), style="bold")
        finished = self.store.finished_rows  # the rows kept as columns count as the rollouts they stand for
        alone = 0 if finished is None else finished.count - int(finished.has_rollout().sum())
        text.append(f"  {len(self.store.rollouts) + alone} rollouts")
        if self.store.partial is not None:
            text.append(" so far", style=self.palette.warning)
        if not self.session.offline:  # in what was opened nothing runs: its unended rollouts are not running
            text.append(f" · {self.store.running_count()} running")
        if self._stalled:
            text.append(f" · {self._stalled} stalled", style=self.palette.warning)
        if (dropped := self.store.dropped_frames):
            text.append(f" · {dropped} frame{'s' if dropped > 1 else ''} dropped", style=self.palette.warning)
        if self.table.row_filter:
            text.append(f" · {self.table.row_count} shown")
        if (partial := self.store.partial) is not None:
            text.append(f" · {safe(partial)}", style=self.palette.warning)
        if (replay := self.session.replay) is not None:
            text.append("  ")
            text.append_text(self._replay_state(replay.position()))
        elif self.session.readonly_reason:
            text.append(f"  read-only: {safe(self.session.readonly_reason)}", style=self.palette.warning)
        elif (note := self.session.recording_note) is not None:
            path = self.session.recording_path
            if path is not None and note == str(path):  # the file's name fits a narrow line; quit prints it whole
                note = home_short(path) if self.size.width >= NARROW_STATUS else path.name
                if text.cell_len + len(f"  rec {note}") > self.size.width:
                    note = ""  # a bare "rec…" says nothing: left off, as quit prints it
            if note:
                text.append(f"  rec {safe(note)}", style=self.palette.muted)
        if (cut := self.session.truncated) is not None:
            text.append(f"  {safe(cut)}", style=self.palette.warning)
        self.status.update(text, layout=False)  # one line, whatever it says

    def _replay_state(self, at: ReplayPosition) -> Text:
        """A replay's state and position, so a glance says whether it plays and where."""
        state = "■ ended" if at.finished else "⏸ paused" if at.paused else "▶ playing"
        text = Text(f"replay {state}", style=self.palette.warning if at.paused else "bold")
        duration, total = ("…", "…") if at.total is None or at.duration is None else (clock(at.duration), f"{at.total:,}")
        text.append(f" {clock(at.seconds)} / {duration} · {at.records:,} / {total} records", style=self.palette.muted)
        return text

    # -- selection -------------------------------------------------------------------

    def _rollout(self) -> Rollout | None:
        return self.store.rollouts.get(self.selected) if self.selected else None

    @on(RolloutsTable.RowHighlighted, "#rollouts")
    def _row_highlighted(self, event: RolloutsTable.RowHighlighted) -> None:
        """The selection follows the rollout under the cursor (the table says when that
        changes, filtering included), so `c` and `x` act on the row the user sees."""
        self._select(event.key)

    @on(TimelineView.Highlighted)
    def _timeline_highlighted(self, event: TimelineView.Highlighted) -> None:
        """The timeline's cursor moves the table's (and so the selection) with it; a
        rollout the table's filter hides is selected all the same."""
        self.table.select(event.key)
        self._select(event.key)

    @on(TimelineView.Chosen)
    def _timeline_chosen(self, event: TimelineView.Chosen) -> None:
        self._timeline_highlighted(TimelineView.Highlighted(event.key))
        self.action_open_trace()

    def _select(self, key: str | None) -> None:
        if key != self.selected:
            self.selected = key
            if self.detail.active == "tab-timeline":
                self.timeline.select(key)
            # The cursor's move reaches the screen first: reading a rollout's traces
            # back (`session.select`) and laying out a long transcript take tens of ms
            # each, and a held arrow key must not wait on them for every row it passes.
            self.session.user_busy()
            moved, self._moved = self._moved, time.monotonic()
            if self._moved - moved < SETTLE or self._moved - self._typed < SETTLE:
                self._show_when_settled()
            else:
                self._stop_settle()
                self.call_after_refresh(self._show_selected, key)

    def _show_when_settled(self) -> None:
        """The selected rollout's transcript once nothing moved for SETTLE."""
        self._stop_settle()
        self._settle = self.set_timer(SETTLE, partial(self._settled, self.selected))

    def _settled(self, key: str | None) -> None:
        self._settle = None
        self._show_selected(key)

    def _select_in_engine(self, key: str | None) -> None:
        """The session loads the rollout's traces (from a recording, if they left
        memory) and keeps them while it is selected; it says why if it cannot."""
        self.session.select(key)
        if (rollout := self._rollout()) is not None and rollout.unavailable:
            self.notify(safe(rollout.unavailable), title="Its traces cannot be shown", severity="error")

    def _stop_settle(self) -> None:
        if self._settle is not None:
            self._settle.stop()
            self._settle = None

    def _show_selected(self, key: str | None) -> None:
        if key == self.selected and self.is_running:
            self._select_in_engine(key)
            self.trace_pane.show(self._rollout())
            self._show_timing(self.store.clock())

    @on(RolloutsTable.RowSelected, "#rollouts")
    def _row_selected(self) -> None:
        self.action_open_trace()

    @on(CompareView.TaskChosen)
    def _task_chosen(self, event: CompareView.TaskChosen) -> None:
        """The task's traces side by side, opened on the variants last chosen there."""

        def chosen(variants: list[str] | None) -> None:
            self._side_variants = variants or self._side_variants

        self.push_screen(SideBySideScreen(self.store, event.chosen, self.session.show, self._side_variants), chosen)

    @on(TracePane.TraceChanged)
    def _trace_changed(self) -> None:
        self._show_timing(self.store.clock())

    # -- filter ----------------------------------------------------------------------

    def action_filter(self) -> None:
        """`/` is a priority key so the keys typed right after it (fast typing, a paste,
        keys that arrive in one read) reach the filter, never the table's `c`, `x`,
        `s` or `q`: the focus moves before they are dispatched. In a text field or
        over a modal screen `/` is left alone."""
        if self.screen is not self.screen_stack[0] or isinstance(self.focused, Input):
            raise SkipAction()
        if self.focused is self.trace_pane.transcript:  # in the trace, `/` searches it
            self.trace_pane.open_search()
            return
        if self.metrics is not None and self.focused is self.metrics:  # in the run's metrics, it filters their keys
            self.screen.set_focus(self.query_one("#metrics-filter", Input).add_class("-visible"))
            return
        field = self.query_one("#filter", Input).add_class("-visible")
        self.screen.set_focus(field)

    def _apply_filter(self, text: str) -> None:
        self._typed = time.monotonic()
        if self._settle is not None:
            self._show_when_settled()
        self.table.set_filter(RowFilter.parse(text), self._filter_applied)

    def _filter_applied(self) -> None:
        """Once the table's rows are the filter's (a long pass ends frames after the key)."""
        self.trace_pane.set_hidden(self.table.pinned)
        self._show_filter_hint(self.table.row_filter)

    def _show_filter_hint(self, row_filter: RowFilter) -> None:
        """Say why a filter shows nothing: a value no rollout can have (and which exist),
        or no match; never an empty table without a word."""
        hint = self.query_one("#filter-hint", Static)
        problems = row_filter.problems(self.store.variants)
        if not problems and row_filter and not self.table.row_count:
            problems = ["no rollout matches (Esc clears the filter)"]
        text = "; ".join(problems)
        if text != hint.content:  # an update lays the screen out again: not per keystroke
            hint.update(text)
            hint.display = bool(problems)

    def _rejudge_filter_hint(self) -> None:
        """The hint weighs the rows as they are now: rollouts that arrive, finish or
        cross the filter's line with time change whether anything matches, and a "no
        rollout matches" judged only at the last keystroke stayed under rows that did."""
        if self.table.row_filter:
            self._show_filter_hint(self.table.row_filter)

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self) -> None:
        """Enter keeps the filter and goes back to the table; an empty one hides."""
        field = self.query_one("#filter", Input)
        field.set_class(bool(field.value), "-visible")
        self.table.focus()

    def action_clear_filter(self) -> None:
        """Escape in the filter or the table clears the filter, back on the table; in
        the trace's search field it clears the search; in the transcript (its
        selection already cleared) it clears a search, else goes back to the table."""
        if self.focused is self.query_one("#trace-search", Input):
            self.trace_pane.clear_search()
            return
        if self.metrics is not None and self.focused in (self.metrics, self.query_one("#metrics-filter", Input)):
            self._clear_metrics_filter()
            return
        if self.focused is self.trace_pane.transcript:
            if self.trace_pane.transcript.search_status:
                self.trace_pane.clear_search()
            else:
                self.table.focus()
            return
        field = self.query_one("#filter", Input)
        if self.focused is not field and not (self.focused is self.table and field.value):
            raise SkipAction()
        field.value = ""  # the field applies it now (`FilterField`)
        field.remove_class("-visible")
        self.table.focus()

    @on(Input.Changed, "#metrics-filter")
    def _metrics_filter_changed(self, event: Input.Changed) -> None:
        if self.metrics is not None:
            self.metrics.set_filter(event.value)

    @on(Input.Submitted, "#metrics-filter")
    def _metrics_filter_submitted(self) -> None:
        if self.metrics is not None:
            self.metrics.focus()

    def _clear_metrics_filter(self) -> None:
        """Esc in the metrics' key filter, or on the charts with one set: every key
        again, the charts focused; on the charts with none, back to the table."""
        assert self.metrics is not None
        field = self.query_one("#metrics-filter", Input)
        if self.focused is self.metrics and not field.value:
            self.table.focus()
            return
        field.value = ""
        field.remove_class("-visible")
        self.metrics.focus()

    # -- commands ----------------------------------------------------------------------

    def _writable(self) -> bool:
        reason = self.session.readonly_reason
        if reason:
            self.notify(safe(reason), title="Read-only", severity="warning")
        return not reason

    def _target_variant(self) -> VariantView | None:
        """The focused card's variant, else the selected rollout's."""
        node: DOMNode | None = self.focused
        while node is not None and not isinstance(node, VariantCard):
            node = node.parent
        if isinstance(node, VariantCard):
            return node.variant
        rollout = self._rollout()
        return self.session.variants.get(rollout.variant) if rollout else None

    def action_start_variant(self, variant: VariantView | None = None) -> None:
        if not self._writable():
            return
        variant = variant or self._target_variant()
        if variant is None:
            self.notify("Select a rollout or focus a variant card first.", severity="warning")
        elif not variant.can_start:
            self.notify(f"{safe(variant.name)} is {variant.state}: it cannot start now.", severity="warning")
        else:
            variant.start()
            self.notify(f"Starting {safe(variant.name)}…")

    def action_cancel_variant(self, variant: VariantView | None = None) -> None:
        if not self._writable():
            return
        target = variant or self._target_variant()
        if target is None:
            self.notify("Select a rollout or focus a variant card first.", severity="warning")
            return
        if target.cancel_unavailable:
            self.notify(safe(target.cancel_unavailable), title=f"{safe(target.name)}: no cancel", severity="warning")
            return
        if not target.can_cancel:
            self.notify(f"{safe(target.name)} is {target.state}: nothing to cancel.", severity="warning")
            return
        name = safe(target.name)
        if target.state is VariantState.CANCELLING:
            question = Text(f"Kill {name} now with SIGKILL?\n\nIts grace period is still running.")
        elif target.cancel_words:
            question = Text(f"Cancel variant {name}?\n\n{target.cancel_words}")
        elif target.supervised:
            question = Text(
                f"Cancel variant {name}?\n\nIts runs are cancelled over the wire, then its server gets "
                "SIGTERM, then SIGKILL after the grace period."
            )
        else:
            question = Text(
                f"Cancel variant {name}?\n\nIts runs are cancelled over the wire. Its server at "
                f"{safe(target.address or '?')} is not ours: it is left running."
            )

        def answered(yes: bool | None) -> None:
            if yes:
                target.cancel()
                self._redraw_cards([target.name])

        self.push_screen(ConfirmScreen(question), answered)

    @on(VariantCard.Requested)
    def _card_requested(self, event: VariantCard.Requested) -> None:
        variant = self.session.variants[event.name]
        if event.action == "start":
            self.action_start_variant(variant)
        else:
            self.action_cancel_variant(variant)

    def action_cancel_rollout(self) -> None:
        if not self._writable():
            return
        rollout = self._rollout()
        if rollout is None:
            self.notify("Select a rollout first.", severity="warning")
        elif rollout.status.finished:
            self.notify(f"{safe(rollout.key)} already {rollout.status}.", severity="warning")
        elif rollout.status is Status.CANCELLING:
            self.notify(f"{safe(rollout.key)} is already cancelling.", severity="warning")
        elif (variant := self.session.variants.get(rollout.variant)) and variant.rollout_cancel_unavailable:
            self.notify(safe(variant.rollout_cancel_unavailable), title="No rollout cancel", severity="warning")
        elif self.session.cancel_rollout(rollout.key):
            self.notify(f"Cancelling {safe(rollout.key)}…")
        else:
            self.notify(f"Could not cancel {safe(rollout.key)}.", severity="error")

    def action_open_trace(self) -> None:
        """Enter shows the selected rollout's transcript now, not after the cursor's
        settle: the user asked for it."""
        if self._settle is not None:
            self._stop_settle()
            self._show_selected(self.selected)
        self.detail.active = "tab-trace"
        self.trace_pane.transcript.focus()

    def action_show_tab(self, tab: str) -> None:
        """Compare's keys are its task list's, so showing it focuses the list (its cursor
        shows only with focus). Focus in a pane being hidden goes to the table first:
        left there, Textual would hand it to another widget of that pane, whose tab
        would then come back."""
        if self.focused is not None and self.detail in self.focused.ancestors:
            self.table.focus()
        self.detail.active = tab
        if tab == "tab-compare":
            self.compare.focus()
        elif tab == "tab-trends" and self.metrics is not None:
            self.metrics.focus()
        self._second()

    def action_switch_pane(self, step: int = 1) -> None:
        """Cycle focus over the panes (table, the variant cards, the trace switcher when
        there is one, the details), not every button; shift+tab goes back. The details
        come last, so a Tab pressed in them (as a user does who came by `4` and expects to
        have to focus the list) lands on the table, not on a card whose Enter would open
        the table's trace."""
        if self.screen is not self.screen_stack[0]:
            raise SkipAction()
        panel = self.query_one(VariantsPanel)
        pane = self.detail.get_pane(self.detail.active)
        details: list[Widget] = []
        if pane.id == "tab-trace":
            if (switcher := self.trace_pane.switcher) is not None:
                details.append(switcher)
            details.append(self.trace_pane.transcript)
        else:
            details.append(next((w for w in pane.query("*") if w.focusable and w.display), self.detail))
        panes: list[Widget] = [self.table, panel, *details]
        focused = self.focused
        current = next((i for i, p in enumerate(panes) if focused is p or (focused and p in focused.ancestors)), -1)
        target = panes[(current + step) % len(panes)]
        if target is panel:
            target = next(iter(self.cards.values()), self.table)
        target.focus()

    def action_toggle_follow(self) -> None:
        transcript = self.trace_pane.transcript
        transcript.action_toggle_follow()
        self.notify("Following the newest turn." if transcript.following else "Follow off.")

    @on(Transcript.TokensWanted)
    def action_tokens(self) -> None:
        transcript = self.trace_pane.transcript
        state, node, rollout = transcript.trace_state, transcript.selected_node(), self._rollout()
        if state is None or node is None or rollout is None:
            self.notify("Open a trace with messages first.", severity="warning")
            return
        from tracewatch.tui.tokens.token_view import TokenScreen  # numpy with it: not at every start

        variant = self.session.variants.get(rollout.variant)
        text, note = self.tokenizers.for_variant(rollout.variant, variant.model if variant is not None else None)
        self.push_screen(TokenScreen(state, node, text, note, f"{rollout.variant} · {rollout.task_label}"))

    def action_copy(self) -> None:
        block = self.trace_pane.transcript.selected_block()
        if not block:
            self.notify("Select a message or tool result in the trace first.", severity="warning")
            return
        self.copy_to_clipboard(block)
        self.notify(f"Copied {len(block):,} characters.")

    def action_export(self) -> None:
        if self.selected is None:
            self.notify("Select a rollout first.", severity="warning")
        else:
            self._select_in_engine(self.selected)  # the cursor may not have rested on it yet
            self._export(self.selected)

    @work(thread=True, group="export")
    def _export(self, key: str) -> None:
        try:
            path = self.session.export_episode(key)
        except (OSError, ValueError) as error:  # ValueError: nested too deep for JSON
            self.call_from_thread(self.notify, f"Export failed: {error}", severity="error")
        else:
            self.call_from_thread(self.notify, safe(path.name), title=f"Exported to {safe(home_short(path.parent))}")

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None, time_format: str | None = None) -> str | None:
        """The palette's Screenshot, saved where exports go (the session's folder or
        `--export-dir`) and the path said, or why it failed: Textual's own saves to
        ~/Downloads, which many machines lack, and says only that it failed."""
        name = filename or time.strftime(time_format or "screenshot-%Y-%m-%dT%H-%M-%S.svg")
        self._save_screenshot(name, self.export_screenshot(), None if path is None else Path(path))
        return None

    @work(thread=True, group="export")
    def _save_screenshot(self, name: str, svg: str, directory: Path | None) -> None:
        try:
            saved = self.session.export_text(name, svg, directory)
        except OSError as error:
            self.call_from_thread(self.notify, f"Could not save the screenshot: {error}", title="Screenshot", severity="error")
        else:
            self.call_from_thread(self.notify, safe(saved.name), title=f"Screenshot saved to {safe(home_short(saved.parent))}")

    def action_help(self) -> None:
        self.push_screen(HelpScreen(KEYS))

    async def action_quit(self) -> None:
        if self._quitting:
            return
        warning = self.session.quit_warning
        if warning is None:
            self._quit()
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._quit()

        self.push_screen(ConfirmScreen(Text(f"Quit?\n\n{safe(warning)}.")), answered)

    def _quit(self) -> None:
        self._quitting = True
        self.push_screen(QuitScreen(self.session.shutdown))

    def get_driver_class(self) -> type[Driver]:
        return tolerant(super().get_driver_class())

    def end_on_signal(self) -> None:
        """A signal (Ctrl-C from outside, SIGTERM, a closed terminal) quits as `q` does,
        without asking: every run cancelled and its ending recorded, every server
        stopped, the shutdown's progress shown while the terminal is there."""
        if not self._quitting:
            self._quit()

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Notices here carry names, keys and paths from data: never read as markup."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    # -- replays -------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action.startswith("replay_"):
            return self.session.replay is not None
        return True

    def _replay(self) -> ReplayControls:
        """The replay's controls; the replay keys exist only in a replay."""
        replay = self.session.replay
        if replay is None:
            raise SkipAction()
        return replay

    def action_replay_pause(self) -> None:
        paused = self._replay().toggle_pause()
        self._draw_status()
        self.notify("Replay paused: n steps one record." if paused else "Replay playing.")

    def action_replay_step(self) -> None:
        replay = self._replay()
        if not replay.paused:
            replay.toggle_pause()
        if not replay.step():
            self.notify("The end of the recording.")
        self._draw_status()

    def action_replay_seek(self) -> None:
        replay = self._replay()
        if self.selected is None:
            self.notify("Select a rollout to seek to.", severity="warning")
            return
        replay.seek(self.selected)
        self.notify(f"Playing fast until {self.selected} ends.")

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Every key's action, then Textual's own commands less those we already list
        (its Quit would skip stopping the servers)."""
        ours = [key for key in KEYS if key.palette and self.check_action(key.action.partition("(")[0], ())]
        titles = {key.title for key in ours}
        for key in ours:
            target = self.table if key.where == "table" else self
            yield SystemCommand(key.title, key.help, lambda key=key, target=target: self.run_action(key.action, target))
        for command in super().get_system_commands(screen):
            if command.title not in titles:
                yield command
