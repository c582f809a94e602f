"""One task's traces side by side: a rollout of it from each of two variants, as
transcripts, each under a header (variant, which rollout of how many, reward, how it
ended). `,` and `.` cycle the focused side through its variant's rollouts of the task."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Static

from core.session.store import Rollout, RolloutStore
from tui.format import reward_text, safe
from tui.keys import bindings
from tui.transcript import Transcript

Task = tuple[int, str]
REFRESH = 0.25
"""Seconds between bringing both transcripts up to date (their rollouts may run on)."""


def task_rollouts(store: RolloutStore, variant: str, task: Task) -> list[Rollout]:
    """The variant's rollouts of the task, by run and rollout number."""
    found = [r for r in store.variant_rollouts(variant) if (r.task_index, r.task_label) == task]
    return sorted(found, key=lambda r: (r.run, r.rollout_index))


class Side(Vertical):
    """One variant's rollouts of the task, one shown at a time."""

    def __init__(self, variant: str, rollouts: list[Rollout], load: Callable[[str], None], clock: Callable[[], float], **kwargs) -> None:
        super().__init__(**kwargs)
        self.variant = variant
        self.rollouts = rollouts
        self.load = load
        """Asks the session to load a rollout's records (an opened recording loads on demand)."""
        self.at = 0
        self.head = Static(markup=False, classes="side-head")
        self.transcript = Transcript(clock=clock)

    def compose(self) -> ComposeResult:
        yield self.head
        yield self.transcript

    def on_mount(self) -> None:
        self.show()

    @property
    def rollout(self) -> Rollout | None:
        return self.rollouts[self.at] if self.rollouts else None

    def cycle(self, step: int) -> None:
        if self.rollouts:
            self.at = (self.at + step) % len(self.rollouts)
            self.show()

    def show(self) -> None:
        if (rollout := self.rollout) is not None:
            self.load(rollout.key)
        self.draw()

    def draw(self) -> None:
        """Bring the side up to date: its transcript redraws only what changed (or from
        scratch, once the rollout's first trace has arrived or been loaded)."""
        rollout = self.rollout
        self.transcript.show(rollout.key if rollout else None, rollout.primary if rollout else None)
        self.head.update(self.title())

    def title(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        text.append(safe(self.variant), style="bold")
        rollout = self.rollout
        if rollout is None:
            text.append(" · no rollout of this task", style="dim")
            return text
        text.append(f" · rollout {rollout.rollout_index} of run {rollout.run} ({self.at + 1}/{len(self.rollouts)})")
        text.append(f" · reward {reward_text(rollout.reward) or '–'}")
        ended = rollout.status.value if rollout.status.finished else rollout.phase  # still running: where it is
        text.append(f" · {ended}")
        if rollout.reason and rollout.reason.lower() != ended:
            text.append(f" · {safe(rollout.reason)}", style="bold")
        return text


class SideBySideScreen(Screen[None]):
    """Esc goes back to the compare tab."""

    BINDINGS = bindings("sides")
    DEFAULT_CSS = """
    SideBySideScreen {
        & #task-title { height: 1; padding: 0 1; text-style: bold; }
        & #sides { height: 1fr; }
        & Side { width: 1fr; height: 1fr; border-left: vkey $foreground 20%; }
        & Side:focus-within { border-left: vkey $primary; }
        & .side-head { height: 1; padding: 0 1; background: $boost; }
        & Side:focus-within .side-head { background: $primary 30%; }
        & Transcript { height: 1fr; }
    }
    """

    def __init__(self, store: RolloutStore, task: Task, variants: list[str], load: Callable[[str], None]) -> None:
        super().__init__()
        self.shown_task = task
        self.sides = [Side(name, task_rollouts(store, name, task), load, store.clock) for name in variants]

    def compose(self) -> ComposeResult:
        yield Static(Text(f"task {safe(self.shown_task[1])} · side by side (Esc: back, ',' '.': another rollout of the focused side)"), markup=False, id="task-title")
        with Horizontal(id="sides"):
            yield from self.sides

    def on_mount(self) -> None:
        self.sides[0].transcript.focus()
        self.set_interval(REFRESH, self._refresh)

    def _refresh(self) -> None:
        for side in self.sides:
            side.draw()

    def _focused_side(self) -> Side:
        focused = self.focused
        return next((side for side in self.sides if focused is not None and side in focused.ancestors_with_self), self.sides[0])

    def action_cycle(self, step: int) -> None:
        self._focused_side().cycle(step)

    def action_focus_side(self, index: int) -> None:
        self.sides[min(index, len(self.sides) - 1)].transcript.focus()

    def action_back(self) -> None:
        self.dismiss()
