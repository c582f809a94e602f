"""Modal screens: the key help, a yes/no confirmation, and quitting with progress while
the engine stops every run and child."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from tracewatch.tui.chrome.keys import WHERE, Key
from tracewatch.tui.drawing.literal import safe


class HelpScreen(ModalScreen[None]):
    """Every key from `tracewatch.tui.chrome.keys.KEYS`, by where it works; as wide as the terminal lets."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, keys: Iterable[Key]) -> None:
        super().__init__(classes="modal")
        self.keys = list(keys)

    def compose(self) -> ComposeResult:
        text = Text(end="")
        text.append("tracewatch keys\n", style="bold")
        width = max(len(key.shown) for key in self.keys)
        for where, heading in WHERE.items():
            keys = [key for key in self.keys if key.where == where]
            if not keys:
                continue
            text.append(f"\n{heading}\n", style="bold underline")
            for key in keys:
                text.append(f"{key.shown:>{width}}  ", style="bold")
                text.append(f"{key.local_help}\n")
        text.append("\nMouse: click a row, a column header to sort, a card's buttons, a tab, a Compare task (its traces side by side); double-click a message for its tokens.", style="dim")
        with VerticalScroll(classes="dialog", id="help"):
            yield Static(text, markup=False)


class ConfirmScreen(ModalScreen[bool]):
    """`y` confirms; `n`, escape or a click on No declines."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: Text) -> None:
        super().__init__(classes="modal")
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="confirm"):
            yield Static(self.question, markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", id="no")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class QuitScreen(ModalScreen[None]):
    """Shows the engine's shutdown progress, then exits the app."""

    def __init__(self, shutdown: Callable[[Callable[[str], None]], Awaitable[None]]) -> None:
        super().__init__(classes="modal")
        self.shutdown = shutdown
        self.lines: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="quit"):
            yield Static(Text("Shutting down: cancelling runs and stopping servers…", style="bold"))
            yield Static(markup=False, id="quit-progress")

    def on_mount(self) -> None:
        self.run_worker(self._run(), exclusive=True, group="shutdown")

    def progress(self, line: str) -> None:
        self.lines.append(line)
        for shown in self.query("#quit-progress").results(Static):  # none once the screen is gone
            shown.update(Text("\n".join(safe(line) for line in self.lines[-12:])))

    async def _run(self) -> None:
        try:
            await self.shutdown(self.progress)
        except Exception as error:  # the app must still exit; say what did not stop cleanly
            self.app.exit(return_code=1, message=f"tracewatch: shutdown did not finish cleanly: {error}")
            return
        self.app.exit()
