"""Two variants' rollouts of one task in a real store, fed turn by turn, each turn a
tool result and a call: traces that part where a test says, for the side-by-side tests
and its golden snapshot."""

from __future__ import annotations

import json
from typing import Any

from tests.support.tui_standin import StandInEngine, StandInVariant
from tracewatch.core.session.store import RolloutStore

OUTPUT = "\n".join(f"line {n}: [b]text[/b] of the file" for n in range(12))
"""A tall tool result, so that a trace runs past the screen (and markup-like: drawn literally)."""


def step(turn: int, tool: str = "read", argument: int | None = None) -> list[dict[str, Any]]:
    """A turn: the previous call's result (a user's question for the first), then a call."""
    first = {"role": "user", "content": "find the bug"} if turn == 1 else {"role": "tool", "content": f"result {turn - 1}\n{OUTPUT}", "tool_call_id": f"id-{turn}"}
    call = {"id": f"c{turn}", "type": "function", "function": {"name": tool, "arguments": json.dumps({"line": turn if argument is None else argument})}}
    return [{"message": first}, {"message": {"role": "assistant", "content": f"looking at {turn}", "tool_calls": [call]}, "sampled": True}]


class Scripted:
    """Two variants' rollouts of one task, fed turn by turn into a real store."""

    def __init__(self) -> None:
        self.store = RolloutStore(clock=lambda: 10.0)
        self.sent: dict[str, int] = {}
        for variant in ("a", "b"):
            rollout = self.store.add_rollout(variant, 0, {"name": "the bug"}, 0)
            self.store.started(rollout.key, f"r-{variant}", t=0.0)
            self.store.apply_delta(rollout.key, {"trace": f"t-{variant}", "open": {"id": f"t-{variant}"}}, t=0.0)
            self.sent[rollout.key] = 0
        self.engine = StandInEngine(self.store, {name: StandInVariant(name, self.store) for name in ("a", "b")})

    def key(self, variant: str) -> str:
        return next(key for key in self.sent if key.startswith(variant))

    def send(self, variant: str, nodes: list[dict[str, Any]]) -> None:
        key = self.key(variant)
        first = self.sent[key]
        linked = [dict(node, parent=first + i - 1 if first + i else None) for i, node in enumerate(nodes)]
        self.store.apply_delta(key, {"trace": f"t-{variant}", "nodes": linked}, t=1.0)
        self.sent[key] += len(linked)

    def finish(self, variant: str) -> None:
        key = self.key(variant)
        self.store.finished(key, {"traces": [dict(self.store.rollouts[key].assembly.traces[f"t-{variant}"])]}, t=2.0)


def diverged() -> Scripted:
    """Twenty turns a side (more than a transcript lays out at first), both ended,
    alike but for turn 3's arguments and turn 6's tool."""
    scripted = Scripted()
    for turn in range(1, 21):
        scripted.send("a", step(turn, "read" if turn != 6 else "grep"))
        scripted.send("b", step(turn, argument=99 if turn == 3 else None))
    scripted.finish("a")
    scripted.finish("b")
    return scripted
