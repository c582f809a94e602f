"""Where two traces diverge, defined plainly: both traces whole, split into turns from
scratch and every pair judged, facet by facet: what `tracewatch.core.session.divergence.TurnPairs`
(which reads only what landed since its last look) must agree with."""

from __future__ import annotations

import json
from typing import Any

from tracewatch.core.session.divergence import Difference


def split_turns(nodes: list[dict[str, Any]]) -> list[tuple[list[dict[str, Any]], bool]]:
    """Each turn's nodes and whether its reply (a sampled node, which closes it) landed."""
    turns: list[tuple[list[dict[str, Any]], bool]] = []
    current: list[dict[str, Any]] = []
    for node in nodes:
        current.append(node)
        if node.get("sampled"):
            turns.append((current, True))
            current = []
    if current:
        turns.append((current, False))
    return turns


def _arguments(raw: Any) -> Any:
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return raw


def _facets(turn: list[dict[str, Any]]) -> list[tuple[Difference, Any]]:
    """In the order a turn is read: its inputs, whether it has a reply, the reply's calls, its text."""
    inputs = [node for node in turn if not node.get("sampled")]
    replies = [node["message"] for node in turn if node.get("sampled")]
    reply = replies[0] if replies else {}
    calls = [call["function"] for call in reply.get("tool_calls") or ()]
    return [
        (Difference.TOOL_RESULT, [n["message"].get("content") for n in inputs if n["message"].get("role") == "tool"]),
        (Difference.TEXT, [(n["message"].get("role"), n["message"].get("content")) for n in inputs if n["message"].get("role") != "tool"]),
        (Difference.MISSING, bool(replies)),
        (Difference.TOOL_CALL, [call.get("name") for call in calls]),
        (Difference.ARGUMENTS, [(call.get("arguments"), _arguments(call.get("arguments"))) for call in calls]),
        (Difference.TEXT, reply.get("content")),
    ]


def _same(kind: Difference, a: Any, b: Any) -> bool:
    if kind is Difference.ARGUMENTS:  # the same text, or the same once read as JSON
        return all(x[0] == y[0] or x[1] == y[1] for x, y in zip(a, b, strict=True))
    return bool(a == b)


def reference_kinds(left: list[dict[str, Any]], right: list[dict[str, Any]], ended: tuple[bool, bool]) -> list[Difference]:
    sides = (split_turns(left), split_turns(right))
    kinds: list[Difference] = []
    for turn in range(max(map(len, sides))):
        whole = [turn < len(turns) and (turns[turn][1] or over) for turns, over in zip(sides, ended, strict=True)]
        if all(whole):
            facets = zip(_facets(sides[0][turn][0]), _facets(sides[1][turn][0]), strict=True)
            kinds.append(next((kind for (kind, a), (_, b) in facets if not _same(kind, a, b)), Difference.SAME))
        elif any(whole) and ended[whole.index(False)]:
            kinds.append(Difference.MISSING)
        else:
            break
    return kinds
