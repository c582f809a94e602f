"""The live trace view: one `TraceState` drawn turn by turn on Textual's Line API.

The transcript is a list of blocks (one per node, failed model call, trace error, and
the pending preview), each rendered once from trace data into width-independent
lines, then wrapped to the widget width. A flat list of wrapped lines is what
`render_line` reads, through a strip cache, so drawing costs one screenful however
long the trace is. A tick's `refresh_trace` compares the trace with what is drawn and
renders only what is new: appended nodes, the one header whose model call arrived
late, the replaced pending block.

Switching to a trace lays out its newest nodes, enough for two screens, and the
earlier ones a chunk at a time as the view scrolls up to them, as a chat loads its
history: each arrow key over the rollouts table shows another trace, and laying out
all of a long one each time took most of the app's time while a fast source streamed.
Search, the Home key and `plain_lines` lay out the rest first.
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.actions import SkipAction
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tracewatch.core.session.divergence import turn_starts
from tracewatch.core.session.trace_state import TraceState
from tracewatch.core.wire.protocol import WireMessage, WireModelCall, WireNode
from tracewatch.tui.chrome.keys import bindings
from tracewatch.tui.drawing.literal import wrap
from tracewatch.tui.drawing.virtual_size import set_virtual_size
from tracewatch.tui.trace.transcript_lines import (
    ROLES,
    Logical,
    Seg,
    copy_text,
    error_lines,
    failed_lines,
    node_body,
    node_head,
    outcome_lines,
    outcome_of,
    pending_body,
    pending_title,
    slice_segs,
)

Line = tuple[tuple[Seg, ...], int, Seg, str | None]
"""A wrapped line: segments, their cell width, padding, and the block's tint."""

FOLLOW_SLACK = 2
"""Within this many lines of the bottom the view counts as at the bottom."""
CHUNK = 16
"""Nodes laid out at a time above the first one laid out."""


class _Block:
    """One message or event; `head` is kept apart so a late model call re-renders
    only the header of its node."""

    __slots__ = ("kind", "source", "head", "body", "lines", "head_rows", "tint")

    def __init__(self, kind: str, source: Any, head: list[Logical], body: list[Logical], tint: str | None = None):
        self.kind = kind
        self.source = source
        self.head = head
        self.body = body
        self.tint = tint
        self.lines: list[Line] = []
        self.head_rows = 0


class Transcript(ScrollView, can_focus=True):
    """One trace, live. The app calls `show` to switch trace and `refresh_trace` on
    its tick when the store says the trace changed."""

    DEFAULT_CSS = """
    Transcript {
        background: $surface;
        color: $foreground;
        overflow-x: hidden;
        overflow-y: scroll;
        scrollbar-gutter: stable;
        & > .transcript--text { color: $foreground; }
        & > .transcript--meta { color: $text-muted; }
        & > .transcript--rule { color: $text-muted; }
        & > .transcript--differs { color: $text-warning; text-style: bold; }
        & > .transcript--system { color: $text-secondary; text-style: bold; }
        & > .transcript--user { color: $text-accent; text-style: bold; }
        & > .transcript--assistant { color: $text-primary; text-style: bold; }
        & > .transcript--tool { color: $text-success; text-style: bold; }
        & > .transcript--other { color: $text-warning; text-style: bold; }
        & > .transcript--call { color: $text-primary; }
        & > .transcript--reasoning { color: $text-muted; text-style: italic; }
        & > .transcript--branch { color: $text-warning; }
        & > .transcript--error { color: $text-error; text-style: bold; }
        & > .transcript--error-text { color: $text-error; }
        & > .transcript--outcome { color: $text-success; text-style: bold; }
        & > .transcript--match { background: $accent 25%; }
        & > .transcript--match-current { background: $accent 60%; }
        & > .transcript--pending { background: $warning 12%; }
        & > .transcript--pending-title { color: $text-warning; text-style: bold; }
        & > .transcript--cursor { background: $primary 22%; }
        & > .transcript--badge { color: $text; background: $primary; text-style: bold; }
    }
    """

    COMPONENT_CLASSES = {
        f"transcript--{key}"
        for key in (
            *ROLES,
            "text", "meta", "rule", "differs", "other", "call", "reasoning", "branch", "error",
            "error-text", "pending", "pending-title", "cursor", "badge", "outcome", "match", "match-current",
        )
    }

    BINDINGS = bindings("transcript")

    class TokensWanted(Message):
        """A double click on a message: the app opens its tokens."""

    class SearchMoved(Message):
        """The current search match changed: the trace pane says which of how many."""

    following: var[bool] = var(True)
    """The view sticks to the bottom as lines arrive."""
    new_since_left: var[int] = var(0)
    """Messages appended since the view stopped following (the badge's count)."""

    def __init__(self, *, clock: Callable[[], float] = time.time, id: str | None = None) -> None:
        super().__init__(id=id)
        self.clock = clock
        """The store's clock, for the pending block's elapsed time."""
        self.blocks_rendered = 0
        self.headers_rendered = 0
        """How many blocks and headers were rendered from trace data (to check that
        a refresh costs what changed)."""
        self.rollout_key: str | None = None
        self.rollout_reward: tuple[float | None, int] = (None, 0)
        """The shown trace's rollout's reward and how many scored traces it is the mean
        of (`show_rollout_reward`)."""
        self._state: TraceState | None = None
        self._cache: LRUCache[tuple[int, int], Strip] = LRUCache(1024)
        self._styles: dict[tuple[str, str | None, bool], Style] = {}
        self._width = 0
        self._query = ""
        self._matches: list[int] = []
        """Lines holding the search text, top to bottom; `_match_at` is the current one."""
        self._match_at = -1
        self._match_set: set[int] = set()
        self._differs: dict[int, str] = {}
        """Turns marked as differing from another trace's, by number (`mark_turns`):
        kept when the trace switches, until whoever marked them marks the new one's."""
        self._reset()

    def _reset(self) -> None:
        self._blocks: list[_Block] = []
        self._starts: list[int] = []
        self._lines: list[Line] = []
        self._node_blocks: dict[int, int] = {}
        self._committed = 0
        self._first_node = 0
        """Nodes before this one are not laid out yet (`_lay_out_above`)."""
        self._first_failed = 0
        """Nor are the failed calls before this one (they precede the first node)."""
        self._errors = 0
        self._nodes_done = self._calls_done = self._failed_done = 0
        self._turn = 0
        self._after_sampled = True
        """Whether the next node opens a turn (the first one does)."""
        self._revision = -1
        self._pending_ref: object = None
        self._pending: _Block | None = None
        self._outcome: _Block | None = None
        self._cursor: int | None = None
        self._cache.clear()

    # -- the app's API ---------------------------------------------------------------

    def show(self, rollout_key: str | None, trace_state: TraceState | None, rollout_reward: tuple[float | None, int] = (None, 0)) -> None:
        """Switch to another trace (drawn from scratch) or, if it is the one shown,
        bring it up to date. The rollout's reward comes with the trace: set before,
        it would draw the old trace's outcome again with the new rollout's number."""
        if rollout_key == self.rollout_key and trace_state is self._state:
            self.show_rollout_reward(rollout_reward)
            self.refresh_trace()
            return
        self.rollout_key, self._state, self.rollout_reward = rollout_key, trace_state, rollout_reward
        self._reset()
        self.following, self.new_since_left = True, 0
        set_virtual_size(self, Size(self._width, 0))
        if trace_state is not None and len(trace_state.sampled) == len(trace_state.nodes):
            self._start_at(trace_state, max(0, len(trace_state.nodes) - CHUNK))
        self.refresh_trace()
        self._lay_out_enough()
        self.refresh()

    def show_rollout_reward(self, reward: tuple[float | None, int]) -> None:
        """The rollout's reward and how many scored traces it is the mean of: the
        outcome of one trace of several says both, drawn again when another trace's
        score moves the mean although this trace did not change."""
        if reward != self.rollout_reward:
            self.rollout_reward = reward
            self._revision = -1
            self.refresh_trace()

    def refresh_trace(self) -> None:
        """Draw what changed in the trace since the last call; nothing if nothing did."""
        state = self._state
        if state is None or state.revision == self._revision:
            return
        self._revision = state.revision
        before = len(self._lines)
        added = self._sync(state)
        set_virtual_size(self, Size(self._width, len(self._lines)))
        if self._query:
            self._find()
        if self.following:
            if len(self._lines) != before:
                self.scroll_end(animate=False, immediate=True, x_axis=False)
        elif added:
            self.new_since_left += added
        self.refresh()

    def action_toggle_follow(self) -> None:
        if self.following:
            self.following = False
        else:
            self.action_jump_end()

    def action_scroll_home(self) -> None:
        """Home: the top of the whole trace."""
        self._lay_out_all()
        super().action_scroll_home()

    def action_jump_end(self) -> None:
        """Go to the bottom and follow from there."""
        self.following, self.new_since_left = True, 0
        self.scroll_end(animate=False, immediate=True, x_axis=False)

    def mark_turns(self, differs: Mapping[int, str]) -> None:
        """Mark these turns (by number) as differing from another trace's, each with
        how: the rules of those laid out are drawn again, the others when laid out."""
        changed = {turn for turn in differs.keys() | self._differs.keys() if differs.get(turn) != self._differs.get(turn)}
        self._differs = dict(differs)
        if not changed or self._state is None:
            return
        starts = turn_starts(self._state.sampled)
        for turn in changed:
            position = self._node_blocks.get(starts[turn - 1]) if turn <= len(starts) else None
            if position is not None:
                self._rehead(position)

    def scroll_to_turn(self, turn: int) -> None:
        """Put the turn's rule at the top (the trace's end when it has no such turn)."""
        state = self._state
        starts = turn_starts(state.sampled) if state is not None else []
        if turn > len(starts):
            self.action_jump_end()
            return
        self.following = False
        while self._first_node > starts[turn - 1]:
            self._lay_out_above()
        position = self._node_blocks.get(starts[turn - 1])
        if position is not None:
            self.scroll_to(y=self._starts[position], animate=False, immediate=True)

    @property
    def trace_state(self) -> TraceState | None:
        return self._state

    def selected_node(self) -> int | None:
        """The node under the cursor, or the newest node: what the token view opens."""
        if self._cursor is not None and self._blocks[self._cursor].kind == "node":
            index: int = self._blocks[self._cursor].source[0]
            return index
        if self._state is not None and self._state.nodes:
            return len(self._state.nodes) - 1
        return None

    def selected_block(self) -> str | None:
        """The raw text of the message under the cursor, or of the last message: what
        the app's copy key copies (as the trace holds it, never to be drawn)."""
        if self._cursor is not None:
            return copy_text(self._blocks[self._cursor].kind, self._blocks[self._cursor].source)
        for block in reversed(self._blocks):
            if block.kind not in ("error", "outcome"):
                return copy_text(block.kind, block.source)
        return None

    # -- from trace to blocks --------------------------------------------------------

    def _start_at(self, state: TraceState, first: int) -> None:
        """Lay out from node `first` on; what precedes it waits (`_lay_out_above`)."""
        self._first_node = self._nodes_done = first
        self._first_failed = self._failed_done = bisect_left(state.failed_calls, (first,))
        self._turn = state.turns_before(first)
        self._after_sampled = first == 0 or bool(state.sampled[first - 1])
        self._calls_done = len(state.record.get("calls") or ())  # drawn with their nodes

    def _lay_out_enough(self) -> None:
        """Two screens' worth of lines, or all of them while a search is on (a search
        must see every line)."""
        if self._query:
            self._lay_out_all()
        while self._first_node and len(self._lines) < 2 * self.size.height:
            self._lay_out_above()

    def _lay_out_all(self) -> None:
        self._lay_out_above(self._first_node)

    def _lay_out_near_top(self) -> None:
        """The view scrolled up to within a screen of the first line laid out."""
        while self._first_node and self.scroll_offset.y < self.size.height:
            self._lay_out_above()

    def _lay_out_above(self, count: int = CHUNK) -> int:
        """Lay out the `count` nodes (and failed calls) just above the first one laid
        out, the view kept on the line it shows; returns how many lines were added."""
        state = self._state
        first = self._first_node
        if state is None or not first:
            return 0
        start = max(0, first - count)
        failed, done = state.failed_calls, bisect_left(state.failed_calls, (start,))
        turn = state.turns_before(start)
        blocks: list[_Block] = []
        nodes: dict[int, int] = {}
        for index, node in enumerate(state.nodes[start:first], start):
            while done < self._first_failed and failed[done][0] <= index:
                call = state.call(failed[done][1])
                blocks.append(self._block("failed", call, [], failed_lines(call)))
                done += 1
            opens = index == 0 or state.sampled[index - 1]
            turn += bool(opens)
            nodes[index] = len(blocks)
            blocks.append(self._node_block(index, node, turn if opens else None))
        lines: list[Line] = []
        starts: list[int] = []
        for block in blocks:
            self._wrap_block(block)
            starts.append(len(lines))
            lines.extend(block.lines)
        added, count = len(lines), len(blocks)
        self._blocks[0:0] = blocks
        self._starts = starts + [at + added for at in self._starts]
        self._lines[0:0] = lines
        self._node_blocks = nodes | {index: at + count for index, at in self._node_blocks.items()}
        self._committed += count
        if self._cursor is not None:
            self._cursor += count
        self._first_node, self._first_failed = start, bisect_left(failed, (start,))
        self._cache.clear()
        set_virtual_size(self, Size(self._width, len(self._lines)))
        if self.following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        elif added:
            self.scroll_to(y=self.scroll_offset.y + added, animate=False, immediate=True)
        self.refresh()
        return added

    def _sync(self, state: TraceState) -> int:
        """Append what is new, re-head nodes whose call arrived late, replace the
        pending block; return how many messages were added."""
        added = 0
        calls = state.record.get("calls") or []
        for call in calls[self._calls_done :]:
            sampled = call.get("node")
            if isinstance(sampled, int) and sampled in self._node_blocks:
                self._rehead(self._node_blocks[sampled])
        self._calls_done = len(calls)
        nodes, failed = state.nodes, state.failed_calls
        # each read decodes a node or call (`PackedList`): read each new one once
        for index, node in enumerate(nodes[self._nodes_done :], self._nodes_done):
            while self._failed_done < len(failed) and failed[self._failed_done][0] <= index:
                added += self._add_failed(state.call(failed[self._failed_done][1]))
            self._node_blocks[index] = self._committed
            turn = None
            if self._after_sampled:
                self._turn += 1
                turn = self._turn
            added += self._add_committed(self._node_block(index, node, turn))
            self._after_sampled = bool(node.get("sampled"))
        self._nodes_done = len(nodes)
        while self._failed_done < len(failed):
            added += self._add_failed(state.call(failed[self._failed_done][1]))
        errors = state.errors
        for error in errors[self._errors :]:
            self._insert(self._committed + self._errors, self._block("error", error, [], error_lines(error)))
            self._errors += 1
            added += 1
        self._show_outcome(outcome_of(state.record, self.rollout_reward))
        pending = state.record.get("pending")
        if pending is not self._pending_ref:
            self._pending_ref = pending
            self._show_pending(pending or [], state.pending_since)
        return added

    def _show_outcome(self, outcome: dict[str, Any] | None) -> None:
        """The verdict block after the turns and errors (before any pending preview),
        drawn again only when what it shows changed."""
        shown = self._outcome.source if self._outcome is not None else None
        if outcome is None or outcome == shown:
            return
        block = self._block("outcome", outcome, [], outcome_lines(outcome))
        position = self._committed + self._errors
        if self._outcome is None:
            self._insert(position, block)
        else:
            self._wrap_block(block)
            self._place(position, block)
        self._outcome = block

    def _add_committed(self, block: _Block) -> int:
        self._insert(self._committed, block)
        self._committed += 1
        return 1

    def _add_failed(self, call: WireModelCall) -> int:
        self._failed_done += 1
        return self._add_committed(self._block("failed", call, [], failed_lines(call)))

    def _node_block(self, index: int, node: WireNode, turn: int | None) -> _Block:
        """A node's block; `turn` when it opens one (the first node after a sampled
        one does)."""
        block = self._block("node", (index, node, turn), [], node_body(node.get("message") or {}))
        block.head = self._node_head(block)
        return block

    def _node_head(self, block: _Block) -> list[Logical]:
        index, node, turn = block.source
        self.headers_rendered += 1
        call = self._state.node_call(index) if self._state else None
        return node_head(index, node, call, turn, self._differs.get(turn) if turn else None)

    def _rehead(self, position: int) -> None:
        block = self._blocks[position]
        self._replace_head(position, self._node_head(block))

    def _replace_head(self, position: int, head: list[Logical]) -> None:
        """New header lines for a block, its body kept as wrapped; redrawn in place
        when the row count holds (the common case), else the tail shifts."""
        block = self._blocks[position]
        block.head = head
        rows = self._wrap(head, block.tint)
        if len(rows) == block.head_rows:
            start = self._starts[position]
            block.lines[: len(rows)] = self._lines[start : start + len(rows)] = rows
            self._forget(start, start + len(rows))
            self.refresh_lines(start, len(rows))
            return
        block.lines = rows + block.lines[block.head_rows :]
        block.head_rows = len(rows)
        self._place(position, block)

    def _block(self, kind: str, source: Any, head: list[Logical], body: list[Logical], tint: str | None = None) -> _Block:
        self.blocks_rendered += 1
        return _Block(kind, source, head, body, tint)

    def _show_pending(self, messages: list[WireMessage], since: float | None) -> None:
        position = len(self._blocks) - 1
        if self._pending is not None and not messages:
            self._place(position, None)
            self._pending = None
            return
        if not messages:
            return
        block = self._block("pending", (messages, since), [pending_title(since, self.clock())], pending_body(messages), "pending")
        if self._pending is None:
            self._insert(len(self._blocks), block)
        else:
            self._wrap_block(block)
            self._place(position, block)
        self._pending = block

    # -- blocks to lines -------------------------------------------------------------

    def _wrap(self, logical: list[Logical], tint: str | None) -> list[Line]:
        width = self._width
        if width <= 0:
            return []
        lines: list[Line] = []
        for gutter, segs, pad in logical:
            lead = (gutter,) if gutter else ()
            lead_cells = len(gutter[0]) if gutter else 0
            text = segs[0][0] if len(segs) == 1 else "".join(t for t, _ in segs)
            ranges = wrap(text, width - lead_cells)
            if len(ranges) == 1:
                lines.append(((*lead, *segs), lead_cells + ranges[0][2], pad, tint))
                continue
            for start, end, cells in ranges:
                lines.append(((*lead, *slice_segs(segs, start, end)), lead_cells + cells, pad, tint))
        return lines

    def _wrap_block(self, block: _Block) -> None:
        head = self._wrap(block.head, block.tint)
        block.lines = head + self._wrap(block.body, block.tint)
        block.head_rows = len(head)

    def _insert(self, position: int, block: _Block) -> None:
        """Wrap a new block and put it at `position`."""
        self._wrap_block(block)
        self._blocks.insert(position, block)
        self._starts.insert(position, self._starts[position] if position < len(self._starts) else len(self._lines))
        if self._cursor is not None and self._cursor >= position:
            self._cursor += 1
        self._place(position, block, old=0)

    def _place(self, position: int, block: _Block | None, old: int | None = None) -> None:
        """Put a block's wrapped lines at `position` in the flat index in place of
        the `old` lines there (by default, that block's; None removes the block),
        shifting only what follows."""
        total = len(self._lines)
        start = self._starts[position]
        if old is None:
            old = self._end(position) - start
        lines = block.lines if block is not None else []
        self._lines[start : start + old] = lines
        if block is None:
            del self._blocks[position], self._starts[position]
            if self._cursor is not None and self._cursor >= len(self._blocks):
                self._cursor = None
        else:
            self._blocks[position] = block
        shift = len(lines) - old
        if shift:
            for later in range(position + (block is not None), len(self._starts)):
                self._starts[later] += shift
        self._forget(start, max(total, len(self._lines)) if shift else start + old)

    def _forget(self, start: int, end: int) -> None:
        """Drop cached strips of lines start..end (the whole cache when that is more)."""
        if end - start > len(self._cache):
            self._cache.clear()
            return
        for y in range(start, end):
            self._cache.discard((y, self._width))

    def _end(self, position: int) -> int:
        return self._starts[position + 1] if position + 1 < len(self._starts) else len(self._lines)

    def _rewrap(self) -> None:
        """Wrap every block to the new width (a resize: the one whole-transcript pass)."""
        self._lines = []
        for position, block in enumerate(self._blocks):
            self._wrap_block(block)
            self._starts[position] = len(self._lines)
            self._lines.extend(block.lines)
        self._cache.clear()
        set_virtual_size(self, Size(self._width, len(self._lines)))

    def _block_at(self, y: int) -> int | None:
        if not 0 <= y < len(self._lines):
            return None
        return bisect_right(self._starts, y) - 1

    # -- drawing ---------------------------------------------------------------------

    def _sticky_pending(self) -> int | None:
        """The pending block's header line when the block runs above the view's top: a
        tall preview keeps its header ("awaiting reply · 2:06") in sight."""
        if self._pending is None or not self._blocks or self._blocks[-1] is not self._pending:
            return None
        start, top = self._starts[-1], self.scroll_offset.y
        return start if start < top < len(self._lines) else None

    # -- search ----------------------------------------------------------------------

    def search(self, query: str) -> None:
        """Mark every line holding `query` (any case) and go to the first from the top
        of the view; an empty query clears the marks."""
        self._query = query.lower()
        self._lay_out_enough()
        self._find()
        self._match_at = -1
        if self._matches:
            top = self.scroll_offset.y
            self._match_at = next((i for i, y in enumerate(self._matches) if y >= top), 0) - 1
            self.action_search_next(1)

    @property
    def search_status(self) -> str:
        """ "3/12", "no match", or "" with no search."""
        if not self._query:
            return ""
        return f"{self._match_at + 1}/{len(self._matches)}" if self._matches else "no match"

    def action_search_next(self, step: int = 1) -> None:
        """n / N: the next or previous match, scrolled into view (following stops)."""
        if not self._matches:
            return
        self._match_at = (self._match_at + step) % len(self._matches)
        y = self._matches[self._match_at]
        self.following = False
        self.scroll_to(y=max(0, y - self.scrollable_content_region.height // 3), animate=False, immediate=True)
        self._cache.clear()
        self.refresh()
        self.post_message(self.SearchMoved())

    def _find(self) -> None:
        query = self._query
        self._matches = [
            y for y, line in enumerate(self._lines) if query and query in "".join(text for text, _ in line[0]).lower()
        ] if query else []
        self._match_set = set(self._matches)
        self._match_at = min(self._match_at, len(self._matches) - 1)
        self._cache.clear()
        self.refresh()

    def _line_at(self, index: int) -> Line:
        """A line as drawn: a search match takes the match tint."""
        line = self._lines[index]
        if index in self._match_set:
            current = self._match_at >= 0 and self._matches[self._match_at] == index
            return (line[0], line[1], line[2], "match-current" if current else "match")
        return line

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        index = self.scroll_offset.y + y
        if y == 0 and (sticky := self._sticky_pending()) is not None:
            return self._strip(self._lines[sticky], width, False)
        strip = self._cache.get((index, width))
        if strip is None:
            if index >= len(self._lines):
                strip = Strip.blank(width, self.rich_style)
            else:
                cursor = self._cursor is not None and self._starts[self._cursor] <= index < self._end(self._cursor)
                strip = self._cache[(index, width)] = self._strip(self._line_at(index), width, cursor)
        if not self.following and self.new_since_left and y == self.scrollable_content_region.height - 1:
            badge = self._badge()
            strip = Strip.join([strip.crop(0, max(0, width - len(badge))), Strip([Segment(badge, self._style("badge", None, False))])])
        return strip

    def plain_lines(self) -> list[str]:
        """Every line as drawn at the current width, on screen or not, without styles:
        the whole transcript for a reader that is not the screen."""
        self._lay_out_all()
        width = self.scrollable_content_region.width
        return [self._strip(line, width, False).text for line in self._lines]

    def _strip(self, line: Line, width: int, cursor: bool) -> Strip:
        segs, cells, (pad, pad_key), tint = line
        style = self._style
        segments = [Segment(text, style(key, tint, cursor)) for text, key in segs if text]
        if cells < width:
            segments.append(Segment(pad * (width - cells), style(pad_key, tint, cursor)))
        strip = Strip(segments, max(cells, width))
        return strip.crop(0, width) if cells > width else strip

    def _style(self, key: str, tint: str | None, cursor: bool) -> Style:
        """The theme's style for a key, over the block's tint and the cursor's."""
        cached = self._styles.get((key, tint, cursor))
        if cached is None:
            cached = self.rich_style + self.get_component_rich_style(f"transcript--{key}")
            for layer in (tint, "cursor" if cursor else None):
                if layer:
                    cached += Style(bgcolor=self.get_component_rich_style(f"transcript--{layer}").bgcolor)
            self._styles[(key, tint, cursor)] = cached
        return cached

    def _badge(self) -> str:
        return f" +{self.new_since_left} new ↓ "

    def notify_style_update(self) -> None:
        """A theme or CSS change: styles are resolved again, strips redrawn."""
        super().notify_style_update()
        self._styles.clear()
        self._cache.clear()

    def _refresh_badge(self) -> None:
        if not self.is_mounted:
            return
        region = self.scrollable_content_region
        self.refresh(Region(0, region.height - 1, region.width, 1))

    def watch_following(self) -> None:
        self._refresh_badge()

    def watch_new_since_left(self) -> None:
        self._refresh_badge()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        """Reaching the bottom resumes following; scrolling up stops it."""
        super().watch_scroll_y(old_value, new_value)
        if new_value >= self.max_scroll_y - FOLLOW_SLACK:
            self.following, self.new_since_left = True, 0
        elif new_value < old_value:
            self.following = False
            if self._first_node and new_value < self.size.height:
                self.call_later(self._lay_out_near_top)

    # -- events and keys -------------------------------------------------------------

    def on_mount(self) -> None:
        self.set_interval(1.0, self._tick_pending)

    def on_resize(self) -> None:
        width = self.scrollable_content_region.width
        if width == self._width:
            if self.following:  # shorter, not narrower (cards appeared above): the last line stays in view
                self.scroll_end(animate=False, immediate=True, x_axis=False)
            return
        anchor = self._block_at(round(self.scroll_y))
        self._width = width
        self._rewrap()
        self._lay_out_enough()
        if self._query:
            self._find()
        if self.following or anchor is None:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        else:
            self.scroll_to(y=self._starts[anchor], animate=False, immediate=True)

    def _tick_pending(self) -> None:
        """Advance the pending block's clock, or stop it once the rollout ended with
        no reply: one line redrawn."""
        block, state = self._pending, self._state
        if block is None or state is None or self._width <= 0:
            return
        since = state.pending_since
        if since is None and block.source[1] is None:
            return
        block.source = (block.source[0], since)
        self._replace_head(len(self._blocks) - 1, [pending_title(since, self.clock())])
        if self._sticky_pending() is not None:
            self.refresh(Region(0, 0, self.scrollable_content_region.width, 1))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        region = self.scrollable_content_region
        if (
            not self.following
            and self.new_since_left
            and offset.y == region.height - 1
            and offset.x >= region.width - len(self._badge())
        ):
            self.action_jump_end()
            return
        position = self._block_at(self.scroll_offset.y + offset.y)
        if position is not None:
            self._set_cursor(position)
            if event.chain >= 2 and self._blocks[position].kind == "node":
                self.post_message(self.TokensWanted())

    def action_cursor(self, step: int) -> None:
        """Move the block cursor; from none, start at the message in view."""
        if not self._blocks:
            return
        if self._cursor is not None and self._cursor + step < 0:
            self._lay_out_above()
        if self._cursor is None:
            top = self._block_at(self.scroll_offset.y)
            bottom = self._block_at(min(len(self._lines), self.scroll_offset.y + self.scrollable_content_region.height) - 1)
            position = (top if step > 0 else bottom) or 0
        else:
            position = max(0, min(len(self._blocks) - 1, self._cursor + step))
        self._set_cursor(position)
        start, end = self._starts[position], self._end(position)
        height, y = self.scrollable_content_region.height, self.scroll_offset.y
        if start < y:
            self.scroll_to(y=start, animate=False, immediate=True)
        elif end > y + height:
            self.scroll_to(y=min(start, end - height), animate=False, immediate=True)

    def action_clear_cursor(self) -> None:
        """With no selection, Esc is the app's: back to the table."""
        if self._cursor is None:
            raise SkipAction()
        self._set_cursor(None)

    def _set_cursor(self, position: int | None) -> None:
        for old in (self._cursor, position):
            if old is not None:
                self._forget(self._starts[old], self._end(old))
        self._cursor = position
        self.refresh()
