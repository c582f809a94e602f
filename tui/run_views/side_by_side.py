"""One task's traces side by side: a rollout of it on each side, as transcripts, each
under a header (variant, which rollout of how many, reward, how it ended). Each side
chooses its own variant (`v` / `V` step the focused side through the variants that ran
the task; the same one on both sides compares two of its rollouts) and its rollout
(`,` and `.`). Both follow the store: rollouts of the task that start or end while the
screen is open join the cycling and the header, a variant that runs it joins `v`.

The two traces are compared turn by turn as their turns land (`TurnPairs`): each
differing turn is marked on both sides, the first is named under the title, and `d`
brings both sides to it (again: to the next)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Static

from tracewatch.core.session.contracts import StoreView
from tracewatch.core.session.divergence import TurnPairs
from tracewatch.core.session.rollout import Rollout
from tracewatch.tui.chrome.keys import bindings
from tracewatch.tui.drawing.literal import fit, safe
from tracewatch.tui.drawing.numbers import rollout_reward_text
from tracewatch.tui.table.columns import rollout_number
from tracewatch.tui.trace.transcript import Transcript

HINTS = (
    "side by side · Esc: back · v V: another variant · , .: another rollout (of the focused side) · d: where they differ",
    "Esc back · v V another variant · , . another rollout · d where they differ",
    "Esc back · v V variant · , . rollout · d differ",
)
"""The keys' hint, longest first: the title shows the longest that fits."""
TASK_AT_LEAST = 16
"""Cells of the task's name the hint leaves before a shorter hint is taken."""

Task = tuple[int, str]
REFRESH = 0.25
"""Seconds between bringing both transcripts up to date (their rollouts may run on)."""


def task_rollouts(store: StoreView, variant: str, task: Task) -> list[str]:
    """The keys of the variant's rollouts of the task, by run and rollout number (keys,
    not rollouts: an opened recording replaces a rollout when it loads it)."""
    found = [r for r in store.variant_rollouts(variant) if (r.task_index, r.task_label) == task]
    return [r.key for r in sorted(found, key=lambda r: (r.run, r.rollout_index))]


def variants_that_ran(store: StoreView, task: Task) -> list[str]:
    return [name for name in store.variants if any((r.task_index, r.task_label) == task for r in store.variant_rollouts(name))]


def first_sides(ran: Sequence[str], prefer: Sequence[str]) -> list[str]:
    """The two variants to open with: those preferred (the last chosen) that ran the
    task, then the others that ran it in order; one variant alone fills both sides."""
    chosen = [name for name in prefer if name in ran][:2]
    chosen += [name for name in ran if name not in chosen][: 2 - len(chosen)]
    return (chosen * 2)[:2] if chosen else []


class Side(Vertical):
    """One variant's rollouts of the task, one shown at a time."""

    def __init__(self, store: StoreView, task: Task, ran: list[str], variant: str, moved: Callable[[], None]) -> None:
        super().__init__()
        self.store = store
        self.shown_task = task
        self.ran = ran
        """The variants that ran the task, which this side steps through."""
        self.variant = variant
        self.rollouts = task_rollouts(store, variant, task)
        self.moved = moved
        """Tells the screen this side shows another rollout (the session loads it)."""
        self.at = 0
        self.head = Static(markup=False, classes="side-head")
        self.transcript = Transcript(clock=store.clock)

    def compose(self) -> ComposeResult:
        yield self.head
        yield self.transcript

    def on_mount(self) -> None:
        self.show()

    @property
    def rollout(self) -> Rollout | None:
        return self.store.rollouts.get(self.rollouts[self.at]) if self.rollouts else None

    def follow(self) -> None:
        """The variant's rollouts of the task as the store has them now, still showing
        the one shown (the first, if there was none)."""
        shown = self.rollouts[self.at] if self.rollouts else None
        self.rollouts = task_rollouts(self.store, self.variant, self.shown_task)
        if shown is None:
            if self.rollouts:
                self.show()
        else:
            self.at = self.rollouts.index(shown) if shown in self.rollouts else 0

    def cycle(self, step: int) -> None:
        if self.rollouts:
            self.at = (self.at + step) % len(self.rollouts)
            self.show()

    def choose_variant(self, step: int) -> None:
        """The next (or previous) variant that ran the task, from its first rollout."""
        at = self.ran.index(self.variant) if self.variant in self.ran else -step
        self.variant = self.ran[(at + step) % len(self.ran)]
        self.rollouts = task_rollouts(self.store, self.variant, self.shown_task)
        self.at = 0
        self.show()

    def show(self) -> None:
        self.moved()
        self.draw()

    def draw(self) -> None:
        """Bring the side up to date: its transcript redraws only what changed (or from
        scratch, once the rollout's first trace has arrived or been loaded)."""
        rollout = self.rollout
        if rollout is None:
            self.transcript.show(None, None)
        else:
            self.transcript.show(rollout.key, rollout.primary, (rollout.reward, rollout.scored_traces))
        self.head.update(self.title())

    def title(self) -> Text:
        """Two lines: the variant (which of those that ran the task), then the rollout."""
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        text.append(safe(self.variant), style="bold")
        if self.variant in self.ran:
            text.append(f" · variant {self.ran.index(self.variant) + 1} of {len(self.ran)}", style="dim")
        rollout = self.rollout
        if rollout is None:
            text.append("\nno rollout of this task", style="dim")
            return text
        text.append(f"\nrollout #{rollout_number(rollout)} ({self.at + 1}/{len(self.rollouts)})")  # the table's #
        text.append(f" · reward {rollout_reward_text(rollout.reward, rollout.scored_traces) or '–'}")
        ended = rollout.status.value if rollout.status.finished else rollout.phase  # still running: where it is
        text.append(f" · {ended}")
        if rollout.reason and rollout.reason.lower() != ended:
            text.append(f" · {safe(rollout.reason)}", style="bold")
        if rollout.unavailable:
            text.append(f" · {safe(rollout.unavailable)}", style="bold reverse")
        return text


class SideBySideScreen(Screen[list[str]]):
    """Esc goes back to the compare tab, with the variants the sides show (the next
    task opens with them)."""

    BINDINGS = bindings("sides")
    DEFAULT_CSS = """
    SideBySideScreen {
        & #task-title { height: 1; padding: 0 1; text-style: bold; }
        & #divergence { height: 1; padding: 0 1; color: $text-muted; }
        & #divergence.-differs { color: $text-warning; text-style: bold; }
        & #sides { height: 1fr; }
        & Side { width: 1fr; height: 1fr; border-left: vkey $foreground 20%; }
        & Side:focus-within { border-left: vkey $primary; }
        & .side-head { height: 2; padding: 0 1; background: $boost; }
        & Side:focus-within .side-head { background: $primary 30%; }
        & Transcript { height: 1fr; }
    }
    """

    def __init__(self, store: StoreView, task: Task, show: Callable[[Iterable[str]], None], prefer: Sequence[str] = ()) -> None:
        super().__init__()
        self.store = store
        self.shown_task = task
        self.show = show
        """Tells the session which rollouts the sides show (an opened recording loads
        them on demand; a live one keeps them in memory while shown)."""
        self.ran = ran = variants_that_ran(store, task)
        self._seen = store.version
        self.sides = [Side(store, task, ran, name, self._sides_moved) for name in first_sides(ran, prefer)]
        self.pairs: TurnPairs | None = None
        """The shown traces' turns compared, as they land."""
        self._jumped: int | None = None
        """The differing turn `d` last brought both sides to."""
        self.divergence = Static(markup=False, id="divergence")
        self._said = ""
        if len(self.sides) == 2 and self.sides[0].variant == self.sides[1].variant:
            right = self.sides[1]
            right.at = min(1, len(right.rollouts) - 1)  # one variant on both sides: two of its rollouts

    def compose(self) -> ComposeResult:
        yield Static(markup=False, id="task-title")
        yield self.divergence
        with Horizontal(id="sides"):
            yield from self.sides

    def on_resize(self, event: events.Resize) -> None:
        """The keys' hint whole at any width, the longest that fits; the task's name
        takes what is left and is cut with "…" (a hint cut at the edge lost its keys)."""
        room = event.size.width - 2  # the title's padding
        task = safe(self.shown_task[1])
        hint = next((hint for hint in HINTS if len(hint) + TASK_AT_LEAST <= room), HINTS[-1])
        name = fit(task, max(1, room - len(hint) - len("task  · ")))
        self.query_one("#task-title", Static).update(Text(f"task {name.rstrip()} · {hint}", no_wrap=True, overflow="ellipsis"))

    def on_mount(self) -> None:
        self.sides[0].transcript.focus()
        self._compare()
        self.set_interval(REFRESH, self._refresh)

    def _sides_moved(self) -> None:
        self.show([side.rollout.key for side in self.sides if side.rollout is not None])

    def _refresh(self) -> None:
        if self.store.version != self._seen:  # a rollout was added, started or ended
            self._seen = self.store.version
            self.ran[:] = variants_that_ran(self.store, self.shown_task)  # the list the sides share
            for side in self.sides:
                side.follow()
        for side in self.sides:
            side.draw()
        self._compare()

    def _compare(self) -> None:
        """Judge the turns that landed on both sides since the last look, and mark
        them; a side that shows another trace starts the comparison again."""
        traces = [side.rollout.primary if side.rollout is not None else None for side in self.sides]
        shown = [trace for trace in traces if trace is not None]
        if len(shown) < 2:
            if self.pairs is not None:  # its marks were the last pair's
                for side in self.sides:
                    side.transcript.mark_turns({})
            self.pairs = None
            self._say("nothing to compare yet: a side has no trace", False)
            return
        ended = [side.rollout is not None and side.rollout.status.finished for side in self.sides]
        pairs, fresh = self.pairs, False
        if pairs is None or any(a is not b for a, b in zip(pairs.traces, shown, strict=True)):
            pairs, fresh = TurnPairs(shown[0], shown[1]), True
            self.pairs, self._jumped = pairs, None
        if pairs.update(*ended) or fresh:
            marks = {turn: kind.value for turn, kind in pairs.differing().items()}
            if pairs.first is not None:
                marks[pairs.first] = f"first difference · {marks[pairs.first]}"
            for side in self.sides:
                side.transcript.mark_turns(marks)
        self._say(self._callout(pairs, all(ended)), pairs.first is not None)

    def _say(self, callout: str, differs: bool) -> None:
        if callout != self._said:
            self._said = callout
            self.divergence.update(Text(callout))
            self.divergence.set_class(differs, "-differs")

    def _callout(self, pairs: TurnPairs, ended: bool) -> str:
        first, differing = pairs.first, pairs.differing()
        if first is not None:
            more = len(differing) - 1
            text = f"first difference: turn {first} · {differing[first].value}"
            return text + (f" · {more} more differing turn{'s' * (more != 1)} marked ≠" if more else "") + " · d: both sides there"
        alike = len(pairs.kinds)
        if ended:
            return f"no difference: {alike} turn{'s' * (alike != 1)} alike"
        return f"alike so far: {alike} turn{'s' * (alike != 1)} compared, the rest as they land"

    def _focused_side(self) -> Side:
        focused = self.focused
        return next((side for side in self.sides if focused is not None and side in focused.ancestors_with_self), self.sides[0])

    def action_cycle(self, step: int) -> None:
        self._focused_side().cycle(step)
        self._compare()

    def action_choose_variant(self, step: int) -> None:
        self._focused_side().choose_variant(step)
        self._compare()

    def action_focus_side(self, index: int) -> None:
        self.sides[min(index, len(self.sides) - 1)].transcript.focus()

    def action_next_difference(self) -> None:
        """Both sides to the first differing turn, or the next after the one `d` went to."""
        differing = sorted(self.pairs.differing()) if self.pairs is not None else []
        if not differing:
            self.notify("no difference so far", timeout=2)
            return
        after = [turn for turn in differing if self._jumped is not None and turn > self._jumped]
        self._jumped = (after or differing)[0]
        for side in self.sides:
            side.transcript.scroll_to_turn(self._jumped)

    def action_back(self) -> None:
        self.show(())
        self.dismiss([side.variant for side in self.sides])
