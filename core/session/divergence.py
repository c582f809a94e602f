"""Where two traces of one task part ways: their turns paired by number, each pair the
same or differing in one way (`Difference`), the first difference being what a reader
of two traces side by side looks for.

A turn is what the transcript numbers: the input nodes since the previous sampled node
(tool results, user turns), then the sampled node, the model's reply. A pair is judged
once, when both of its turns are whole (the reply landed, or the trace ended without
one), so a live pair never flips; a turn is read (its nodes decoded) only then, and
each tick reads only the pairs that became whole since the last, so watching two long
traces costs their new turns, not their length. Where the turns are found is read off
the store's one byte per node (`sampled`), without decoding anything.

Reasoning is not compared: two samplings think differently however alike they act;
what a turn said and did is what diverges.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Protocol

from tracewatch.core.wire.protocol import WireNode


class Difference(StrEnum):
    """How a pair of turns differs, the first that applies in the turn's order (its
    inputs come before its reply, a call's name before its arguments)."""

    SAME = "same"
    TOOL_RESULT = "tool result"
    TEXT = "text"
    TOOL_CALL = "tool call"
    ARGUMENTS = "tool arguments"
    MISSING = "one side only"
    """A side ended without this turn (or without its reply)."""


class Turns(Protocol):
    """A trace as the store keeps it (`TraceState`): its nodes, each read decoding one,
    and one byte per node, 1 where the node was sampled."""

    @property
    def nodes(self) -> Sequence[WireNode]: ...

    @property
    def sampled(self) -> bytearray: ...


def turn_starts(sampled: bytearray) -> list[int]:
    """The node that opens each turn: the first node, and each node after a sampled
    one that has landed."""
    starts = [0] if sampled else []
    at = sampled.find(1)
    while at != -1 and at + 1 < len(sampled):
        starts.append(at + 1)
        at = sampled.find(1, at + 1)
    return starts


class TurnPairs:
    """Two traces' turns compared pair by pair as they land: `kinds[i]` is how turn
    i + 1 differs, for every pair judged so far. Made for one pair of traces; a side
    that shows another trace needs a new one."""

    def __init__(self, left: Turns, right: Turns) -> None:
        self.traces = (left, right)
        self.kinds: list[Difference] = []
        self._ends: tuple[list[int], list[int]] = ([], [])
        """Each side's sampled nodes, in order: turn i ends at `_ends[side][i]`."""
        self._scanned = [0, 0]

    @property
    def first(self) -> int | None:
        """The first differing turn's number (turns count from 1), if one was found."""
        return next((turn for turn, kind in enumerate(self.kinds, 1) if kind is not Difference.SAME), None)

    def differing(self) -> dict[int, Difference]:
        """Every differing turn judged so far, by its number."""
        return {turn: kind for turn, kind in enumerate(self.kinds, 1) if kind is not Difference.SAME}

    def update(self, left_ended: bool, right_ended: bool) -> int:
        """Judge the pairs that became whole (a side that `ended` gets no more turns);
        returns how many were judged."""
        ended = (left_ended, right_ended)
        whole = [self._whole(side, ended[side]) for side in (0, 1)]
        before = len(self.kinds)
        while True:
            turn = len(self.kinds)
            have = [turn < whole[side] for side in (0, 1)]
            if all(have):
                self.kinds.append(_judge(self._turn(0, turn), self._turn(1, turn)))
            elif any(have) and ended[have.index(False)]:  # the other side ended short of it
                self.kinds.append(Difference.MISSING)
            else:
                return len(self.kinds) - before

    def _scan(self, side: int) -> list[int]:
        sampled, ends = self.traces[side].sampled, self._ends[side]
        at = sampled.find(1, self._scanned[side])
        while at != -1:
            ends.append(at)
            at = sampled.find(1, at + 1)
        self._scanned[side] = len(sampled)
        return ends

    def _whole(self, side: int, ended: bool) -> int:
        """How many of the side's turns are whole: those with their reply, and an
        ended side's last turn without one."""
        return self._count(side) if ended else len(self._scan(side))

    def _count(self, side: int) -> int:
        """How many turns the side has begun."""
        ends = self._scan(side)
        trailing = len(self.traces[side].sampled) > (ends[-1] + 1 if ends else 0)
        return len(ends) + trailing

    def _turn(self, side: int, turn: int) -> list[WireNode]:
        ends, nodes = self._ends[side], self.traces[side].nodes
        start = ends[turn - 1] + 1 if turn else 0
        stop = ends[turn] + 1 if turn < len(ends) else len(self.traces[side].sampled)
        return [nodes[index] for index in range(start, stop)]


def _judge(left: list[WireNode], right: list[WireNode]) -> Difference:
    a, b = _facts(left), _facts(right)
    if a[0] != b[0]:
        return Difference.TOOL_RESULT
    if a[1] != b[1]:
        return Difference.TEXT
    if (a[2] is None) != (b[2] is None):
        return Difference.MISSING
    if a[2] != b[2]:
        return Difference.TOOL_CALL
    if any(x != y and _parsed(x) != _parsed(y) for x, y in zip(a[3] or (), b[3] or (), strict=True)):
        return Difference.ARGUMENTS
    return Difference.TEXT if a[4] != b[4] else Difference.SAME


def _facts(turn: list[WireNode]) -> tuple[Any, ...]:
    """What a turn is compared by: its tool results, its other inputs, and its reply's
    call names, their arguments (`_parsed` when compared) and its text; the reply's
    three are None when it has none."""
    results, said = [], []
    reply: dict[str, Any] | None = None
    for node in turn:
        message = node.get("message") or {}
        if node.get("sampled"):
            reply = dict(message)
        elif message.get("role") == "tool":
            results.append(message.get("content"))
        else:
            said.append((message.get("role"), message.get("content")))
    if reply is None:
        return results, said, None, None, None
    calls = [call.get("function", call) if isinstance(call, dict) else {} for call in reply.get("tool_calls") or ()]
    calls = [function if isinstance(function, dict) else {} for function in calls]
    return results, said, [f.get("name") for f in calls], [f.get("arguments") for f in calls], reply.get("content")


def _parsed(raw: Any) -> Any:
    """A call's arguments as JSON reads them, so spacing and key order do not count;
    as they came when they are not JSON."""
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw
    return raw
