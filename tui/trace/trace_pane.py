"""The selected rollout's transcript, with a trace switcher when the episode has more
than one trace (multi-agent: solver and judge, sub-agents)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Select, Static

from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.trace_state import TraceState
from tracewatch.tui.drawing.literal import safe
from tracewatch.tui.trace.transcript import Transcript


def trace_label(index: int, trace: TraceState) -> str:
    agent = trace.record.get("agent")
    name = agent.get("name") if isinstance(agent, dict) else None
    return safe(f"{index + 1}. {name or 'trace'} {trace.id[:8]}")


class TracePane(Vertical):
    class TraceChanged(Message):
        """The user picked another trace: the timing view follows it."""

    def __init__(self, clock: Callable[[], float] = time.time, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.clock = clock
        self.rollout: Rollout | None = None
        self.trace_id: str | None = None
        self.hidden = False
        """The shown rollout is not in the table's (filtered) view: the title says so."""
        self._trace_ids: tuple[str, ...] = ()
        self._switcher: Select[str] | None = None

    def compose(self) -> ComposeResult:
        # held, not queried: a tick or a message may come while they are being removed
        self._title_line = Static(markup=False, id="trace-title")
        self._transcript = Transcript(id="transcript", clock=self.clock)
        self._search = Input(placeholder="search the trace (enter: back to it, n/N: next/previous, Esc: clear)", id="trace-search", compact=True)
        self._search.display = False
        yield self._title_line
        yield self._search
        yield self._transcript

    def open_search(self) -> None:
        self._search.display = True
        self._search.focus()

    @on(Input.Changed, "#trace-search")
    def _search_changed(self, event: Input.Changed) -> None:
        self.transcript.search(event.value)
        self._show_search()

    @on(Input.Submitted, "#trace-search")
    def _search_submitted(self) -> None:
        """Enter keeps the search and goes back to the transcript, where n/N jump."""
        self.transcript.focus()

    def clear_search(self) -> None:
        self._search.value = ""
        self._search.display = False
        self.transcript.search("")
        self.transcript.focus()
        self._show_search()

    @on(Transcript.SearchMoved)
    def _show_search(self) -> None:
        if self.rollout is not None and not self._gone:
            self._show_title(self.rollout)

    @property
    def transcript(self) -> Transcript:
        return self._transcript

    @property
    def _gone(self) -> bool:
        """Its parts are being removed (the app is quitting): nothing to draw."""
        return not (self._title_line.is_attached and self._transcript.is_attached)

    @property
    def switcher(self) -> Select[str] | None:
        """The trace switcher, there only while the rollout has more than one trace
        (held: one being removed must not be given the next rollout's trace)."""
        return self._switcher

    def show(self, rollout: Rollout | None) -> None:
        """Switch to another rollout (its first trace)."""
        self.rollout = rollout
        self.trace_id = None
        self._trace_ids = ()
        self.refresh_trace(None)

    def set_hidden(self, hidden: bool) -> None:
        if hidden != self.hidden:
            self.hidden = hidden
            if self.rollout is not None and not self._gone:
                self._show_title(self.rollout)

    def refresh_trace(self, changed: set[tuple[str, str]] | None) -> None:
        """Follow what changed in the shown rollout: new traces reach the switcher; the
        transcript redraws only when its own trace or the rollout's reward changed
        (`changed` None: always)."""
        rollout = self.rollout
        if self._gone:
            return
        title = self._title_line
        if rollout is None:
            title.update(Text("select a rollout (enter opens its trace)", style="dim"))
            self.transcript.show(None, None)
            return
        ids = tuple(rollout.traces)
        if ids != self._trace_ids:
            self._trace_ids = ids
            self._fill_switcher(rollout)
        self._show_title(rollout)
        if self.trace_id not in rollout.traces:
            self._pick(next(iter(ids), None))
            return
        self.transcript.show_rollout_reward((rollout.reward, rollout.scored_traces))
        if changed is None or (rollout.key, self.trace_id) in changed:
            self.transcript.refresh_trace()

    def _show_title(self, rollout: Rollout) -> None:
        """Redrawn only when it says something else: most ticks of a streaming
        rollout do not change it."""
        text = self._title(rollout)
        if text != self._title_line.content:
            self._title_line.update(text, layout=False)
            self._title_line.tooltip = text.plain  # a title cut with "…" is whole on hover

    def _title(self, rollout: Rollout) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        text.append(safe(rollout.variant), style="bold")
        phase, reason = rollout.phase, rollout.reason
        says_phase = reason is not None and reason.lower().startswith(phase)  # "cancelled with the variant"
        text.append(f" · {safe(rollout.task_label)}")
        if not says_phase:
            text.append(f" · {phase}")
        if rollout.note:
            text.append(f" · {safe(rollout.note)}")
        if reason:  # in the phase's place when it starts with it: never "cancelled · cancelled ..."
            text.append(f" · {safe(reason)}", style="bold")
        if rollout.unavailable:
            text.append(f" · {safe(rollout.unavailable)}", style="bold reverse")
        if self.hidden:
            text.append(" · not in the filtered view", style="reverse")
        if status := self.transcript.search_status:
            text.append(f" · search {status} (n/N)", style="bold")
        return text

    def _fill_switcher(self, rollout: Rollout) -> None:
        """A switcher with one entry per trace and no blank one (a blank pick would
        leave the old transcript under a bare label); none for a single trace."""
        options = [(trace_label(i, trace), trace.id) for i, trace in enumerate(rollout.traces.values())]
        switcher = self.switcher
        if len(options) < 2:
            if switcher is not None:
                self._switcher = None
                switcher.remove()
            return
        value = self.trace_id if self.trace_id in rollout.traces else options[0][1]
        if switcher is None:
            switcher = self._switcher = Select(options, value=value, allow_blank=False, compact=True, id="trace-switcher")
            self.mount(switcher, before=self.transcript)
            return
        with switcher.prevent(Select.Changed):
            switcher.set_options(options)
            switcher.value = value

    def _pick(self, trace_id: str | None) -> None:
        self.trace_id = trace_id
        rollout = self.rollout
        if rollout is None or trace_id is None:
            self.transcript.show(None, None)
            return
        if (switcher := self.switcher) is not None and switcher.value != trace_id:
            with switcher.prevent(Select.Changed):
                switcher.value = trace_id
        self.transcript.show(rollout.key, rollout.traces[trace_id], (rollout.reward, rollout.scored_traces))

    @on(Select.Changed, "#trace-switcher")
    def _switched(self, event: Select.Changed) -> None:
        if isinstance(event.value, str) and event.value != self.trace_id:
            self._pick(event.value)
            self.post_message(self.TraceChanged())

