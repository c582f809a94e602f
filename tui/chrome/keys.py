"""Every key, once: the bindings, the command palette, the help screen and docs/keys.md
are all read from `KEYS` (the key tests hold them to it), so a key cannot exist in one
and be missing or different in another."""

from __future__ import annotations

from dataclasses import dataclass, replace

from textual.binding import Binding, BindingsMap, BindingType


@dataclass(frozen=True)
class Key:
    keys: str
    """Textual key names, comma-separated: `ctrl+y,w`."""
    action: str
    title: str
    """The command palette's entry."""
    help: str
    """The command palette's description; the help screen and docs/keys.md show `local_help`."""
    where: str = "app"
    """Which widget binds it: app, table, transcript, compare (the Compare tab), sides
    (the side-by-side traces), tokens (the token view), or replay (app keys that only a
    replay enables)."""
    footer: str = ""
    """Its footer label; empty: not in the footer (the help has every key). A pane's
    own keys come first while it has focus (Textual's footer lists the focused
    widget's bindings before the app's), so the footer says where the keys go."""
    priority: bool = False
    palette: bool = True
    writes: bool = False
    """It changes what runs (start, cancel): a read-only session keeps it off the
    footer, where the replay's keys need the room (pressed, it still says why not)."""

    @property
    def shown(self) -> str:
        """The keys as a user reads them: `ctrl+y / w`."""
        return " / ".join(_NAMES.get(key, key) for key in self.keys.split(","))

    @property
    def local_help(self) -> str:
        """The description under its place's heading: without the "table: " that the palette needs."""
        place, colon, rest = self.help.partition(": ")
        return rest if colon and self.where != "app" and place in ("table", "trace", "compare", "timeline", "metrics", "side by side", "tokens", "replays") else self.help

    def binding(self) -> Binding:
        return Binding(self.keys, self.action, self.footer or self.title, show=bool(self.footer), priority=self.priority)


_NAMES = {
    "slash": "/",
    "question_mark": "?",
    "greater_than_sign": ">",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "up": "↑",
    "down": "↓",
    "escape": "Esc",
    "end": "End",
    "home": "Home",
    "pageup": "PgUp",
    "pagedown": "PgDn",
    "left": "←",
    "right": "→",
    "comma": ",",
    "full_stop": ".",
    "plus": "+",
    "equals_sign": "=",
    "minus": "-",
}

WHERE = {
    "app": "Anywhere",
    "table": "Rollouts table",
    "transcript": "Trace (when the transcript has focus)",
    "compare": "Compare tab (`4` gives it focus; so do tab past the cards, and a click)",
    "timeline": "Timeline tab (when it has focus: tab past the cards, or a click)",
    "metrics": "Trends tab, a training run's own metrics (`6` gives them focus; `/` there filters their keys, Esc clears)",
    "sides": "Side by side (a task's traces, opened from the Compare tab)",
    "tokens": "Tokens (a message's tokens: t, or a double click on the message)",
    "replay": "Replays only",
}
"""Help sections, in the order shown."""

KEYS: tuple[Key, ...] = (
    # Footer first, in the order a narrow footer keeps them: help and quit never drop off.
    Key("question_mark", "help", "Help", "help: every key, by where it works", footer="Help"),
    Key("q", "quit", "Quit", "quit: cancel every run, stop every server, exit", footer="Quit"),
    Key("slash", "filter", "Filter rollouts", "filter rows (variant: status: phase: error: flag: reward:<1 elapsed:>1m30s …); in a trace, search", footer="Filter", priority=True),
    Key("escape", "clear_filter", "Clear filter", "clear the filter and go back to the table"),
    Key("s", "start_variant", "Start variant", "start the selected rollout's variant (or the focused card's)", footer="Start", writes=True),
    Key("x", "cancel_variant", "Cancel variant", "cancel a variant: confirm with y; again while cancelling: SIGKILL now", footer="Stop var", writes=True),
    Key("c", "cancel_rollout", "Cancel rollout", "cancel the selected rollout (a cancel goes over the wire)", footer="Cancel", writes=True),
    Key("e", "export", "Export episode", "export the selected episode as JSON (the path is shown)", footer="Export"),
    Key("enter", "open_trace", "Open trace", "open the selected rollout's trace"),
    Key("tab", "switch_pane(1)", "Next pane", "next pane: table, variant cards, trace switcher, details (then the table)", priority=True),
    Key("shift+tab", "switch_pane(-1)", "Previous pane", "previous pane", priority=True),
    Key("1", "show_tab('tab-trace')", "Show trace tab", "details: the transcript"),
    Key("2", "show_tab('tab-timing')", "Show timing tab", "details: phase waterfall and per-variant p50/p95"),
    Key("3", "show_tab('tab-logs')", "Show logs tab", "details: the variant servers' output"),
    Key("4", "show_tab('tab-compare')", "Show compare tab", "details: the variants task by task (mean ± standard error, where they differ)"),
    Key("5", "show_tab('tab-timeline')", "Show timeline tab", "details: every rollout on one time axis by phase, each variant's concurrency above"),
    Key("6", "show_tab('tab-trends')", "Show trends tab", "details: trends per variant (finished/min, reward, errors, tokens/s, p50 agent time)"),
    Key("f", "toggle_follow", "Toggle follow", "follow the transcript's newest turn (toggle)"),
    Key("t", "tokens", "Tokens of the message", "the selected message's tokens (else the newest's), coloured stream by stream"),
    Key("ctrl+y,w", "copy", "Copy message", "copy the selected message or tool result (OSC 52)"),
    Key("ctrl+p", "command_palette", "Command palette", "command palette: every action", palette=False),
    Key("up", "cursor(-1)", "Row up", "table: previous row", where="table", palette=False),
    Key("down", "cursor(1)", "Row down", "table: next row", where="table", palette=False),
    Key("pageup", "page(-1)", "Page up", "table: a page up", where="table", palette=False),
    Key("pagedown", "page(1)", "Page down", "table: a page down", where="table", palette=False),
    Key("home,g", "first", "First row", "table: the first row", where="table"),
    Key("end,G", "last", "Last row", "table: the last row", where="table"),
    Key("left", "scroll_left", "Scroll left", "table: scroll left", where="table", palette=False),
    Key("right", "scroll_right", "Scroll right", "table: scroll right", where="table", palette=False),
    Key("enter", "select_cursor", "Open trace", "table: open the row's trace", where="table", palette=False),
    Key("o", "cycle_sort", "Sort by next column", "table: sort by the next column", where="table"),
    Key("O", "reverse_sort", "Reverse sort", "table: reverse the order", where="table"),
    Key("up,left_square_bracket", "cursor(-1)", "Previous message", "trace: select the previous message", where="transcript", palette=False),
    Key("down,right_square_bracket", "cursor(1)", "Next message", "trace: select the next message", where="transcript", palette=False),
    Key("end", "jump_end", "Follow the newest", "trace: go to the newest turn and follow it", where="transcript", footer="Newest", palette=False),
    Key("escape", "clear_cursor", "Clear selection", "trace: clear the message selection", where="transcript", palette=False),
    Key("n", "search_next(1)", "Next match", "trace: the next search match", where="transcript", palette=False),
    Key("N", "search_next(-1)", "Previous match", "trace: the previous search match", where="transcript", palette=False),
    Key("up", "cursor(-1)", "Task up", "compare: previous task", where="compare", palette=False),
    Key("down", "cursor(1)", "Task down", "compare: next task", where="compare", palette=False),
    Key("home,g", "first", "First task", "compare: the first task", where="compare", palette=False),
    Key("end,G", "last", "Last task", "compare: the last task", where="compare", palette=False),
    Key("enter", "choose", "Traces side by side", "compare: the task's traces side by side (a click too)", where="compare", footer="Side by side", palette=False),
    Key("up", "cursor(-1)", "Rollout up", "timeline: previous rollout", where="timeline", palette=False),
    Key("down", "cursor(1)", "Rollout down", "timeline: next rollout", where="timeline", palette=False),
    Key("pageup", "page(-1)", "Page up", "timeline: a page up", where="timeline", palette=False),
    Key("pagedown", "page(1)", "Page down", "timeline: a page down", where="timeline", palette=False),
    Key("home,g", "first", "First rollout", "timeline: the first rollout", where="timeline", palette=False),
    Key("end,G", "last", "Last rollout", "timeline: the last rollout", where="timeline", palette=False),
    Key("plus,equals_sign", "zoom(0.5)", "Zoom in", "timeline: zoom in (shift or ctrl with the mouse wheel too)", where="timeline", footer="Zoom", palette=False),
    Key("minus", "zoom(2.0)", "Zoom out", "timeline: zoom out", where="timeline", palette=False),
    Key("left,h", "pan(-1)", "Earlier", "timeline: pan to earlier (the wheel sideways too)", where="timeline", palette=False),
    Key("right,l", "pan(1)", "Later", "timeline: pan to later", where="timeline", palette=False),
    Key("0", "fit", "Whole run", "timeline: the whole run again, following it live", where="timeline", footer="Whole run", palette=False),
    Key("enter", "choose", "Open trace", "timeline: open the rollout's trace (a click on it too)", where="timeline", footer="Open trace", palette=False),
    Key("m", "cycle_smoothing", "Metrics smoothing", "metrics: smoothing off, then an EMA of 0.6, 0.9, 0.99 (the title says which)", where="metrics", footer="Smooth", palette=False),
    Key("comma", "cycle(-1)", "Previous rollout", "side by side: the focused side's previous rollout of the task", where="sides", palette=False),
    Key("full_stop", "cycle(1)", "Next rollout", "side by side: the focused side's next rollout of the task", where="sides", palette=False),
    Key("v", "choose_variant(1)", "Next variant", "side by side: the focused side's next variant that ran the task", where="sides", palette=False),
    Key("V", "choose_variant(-1)", "Previous variant", "side by side: the focused side's previous variant that ran the task", where="sides", palette=False),
    Key("d", "next_difference", "Where they differ", "side by side: both sides to the first turn where they differ (again: the next one)", where="sides", palette=False),
    Key("left", "focus_side(0)", "Left side", "side by side: focus the left side (tab too)", where="sides", palette=False),
    Key("right", "focus_side(1)", "Right side", "side by side: focus the right side", where="sides", palette=False),
    Key("escape", "back", "Back", "side by side: back to the Compare tab", where="sides", priority=True, palette=False),
    Key("left", "token(-1)", "Previous token", "tokens: the previous token", where="tokens", palette=False),
    Key("right", "token(1)", "Next token", "tokens: the next token", where="tokens", palette=False),
    Key("up", "line(-1)", "Line up", "tokens: the token a line up", where="tokens", palette=False),
    Key("down", "line(1)", "Line down", "tokens: the token a line down", where="tokens", palette=False),
    Key("pageup", "page(-1)", "Page up", "tokens: a page up", where="tokens", palette=False),
    Key("pagedown", "page(1)", "Page down", "tokens: a page down", where="tokens", palette=False),
    Key("home,g", "first_token", "First token", "tokens: the first token", where="tokens", palette=False),
    Key("end,G", "last_token", "Last token", "tokens: the last token", where="tokens", palette=False),
    Key("full_stop", "screen.colour(1)", "Next colouring", "tokens: colour by the next stream", where="tokens", palette=False),
    Key("comma", "screen.colour(-1)", "Previous colouring", "tokens: colour by the previous stream", where="tokens", palette=False),
    Key("right_square_bracket", "screen.message(1)", "Next message's tokens", "tokens: the next message", where="tokens", palette=False),
    Key("left_square_bracket", "screen.message(-1)", "Previous message's tokens", "tokens: the previous message", where="tokens", palette=False),
    Key("escape,t", "screen.back", "Back to the trace", "tokens: back to the trace", where="tokens", palette=False),
    Key("space", "replay_pause", "Replay: pause or play", "replays: pause or play", where="replay", footer="Pause"),
    Key("n", "replay_step", "Replay: step", "replays: step one record", where="replay", footer="Step"),
    Key("greater_than_sign", "replay_seek", "Replay: seek to rollout", "replays: play fast to the selected rollout's end, then pause", where="replay", footer="Seek"),
)


def bindings(*where: str) -> list[BindingType]:
    """The bindings of the keys bound in those places."""
    return [key.binding() for key in KEYS if key.where in where]


def hide_writes(bindings: BindingsMap) -> None:
    """Keep the `writes` keys of these bindings off the footer, still bound."""
    for key in KEYS:
        if key.writes:
            for name in key.keys.split(","):
                bindings.key_to_bindings[name] = [replace(binding, show=False) for binding in bindings.key_to_bindings.get(name, [])]
