"""Where two traces diverge: pairs of turns judged as they land in a real store, against
the plain reference, and at what cost."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.divergence_reference import reference_kinds
from tracewatch.core.session.divergence import Difference, TurnPairs, turn_starts
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.trace_state import TraceState

ARGUMENTS = ('{"k": 1}', '{"k":1}', '{"k": 2}', '{"j": 1, "k": 1}', '{"k": 1, "j": 1}', "not json", "")


def node(role: str, content: Any, sampled: bool = False, calls: Sequence[tuple[str, str]] = (), reasoning: str = "", call_id: str = "") -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": content}
    if call_id:
        message["tool_call_id"] = call_id  # ids differ between runs: never compared
    if calls:
        message["tool_calls"] = [{"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(calls)]
    if reasoning:
        message["reasoning_content"] = reasoning
    return {"message": message, "sampled": sampled}


class Feed:
    """Two rollouts of one task in a real store, fed nodes a delta at a time."""

    def __init__(self) -> None:
        self.store = RolloutStore(clock=lambda: 0.0)
        self.keys = []
        for variant in ("a", "b"):
            rollout = self.store.add_rollout(variant, 0, {"name": "t"}, 0)
            self.store.started(rollout.key, f"r-{variant}", t=0.0)
            self.store.apply_delta(rollout.key, {"trace": f"t-{variant}", "open": {"id": f"t-{variant}"}}, t=0.0)
            self.keys.append(rollout.key)
        self.sent: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])

    def trace(self, side: int) -> TraceState:
        trace = self.store.rollouts[self.keys[side]].primary
        assert trace is not None
        return trace

    def send(self, side: int, nodes: list[dict[str, Any]]) -> None:
        first = len(self.sent[side])
        linked = [dict(n, parent=first + i - 1 if first + i else None) for i, n in enumerate(nodes)]
        self.store.apply_delta(self.keys[side], {"trace": self.trace(side).id, "nodes": linked}, t=0.0)
        self.sent[side].extend(linked)


texts = st.sampled_from(["a", "b"])
replies = st.one_of(
    st.none(),
    st.builds(lambda text, calls, why: node("assistant", text, True, calls, why),
              st.sampled_from(["x", "y", None]), st.lists(st.tuples(st.sampled_from(["f", "g"]), st.sampled_from(ARGUMENTS)), max_size=2), st.sampled_from(["", "hm", "so"])),
)
inputs = st.lists(st.builds(node, st.sampled_from(["user", "tool"]), texts, call_id=st.sampled_from(["1", "2"])), max_size=2)
turns = st.tuples(inputs, replies)


def flat(script: list[tuple[list[dict[str, Any]], dict[str, Any] | None]]) -> list[dict[str, Any]]:
    """A trace's nodes from its turns: a turn without a reply ends the trace."""
    nodes: list[dict[str, Any]] = []
    for turn_inputs, reply in script:
        nodes += turn_inputs
        if reply is None:
            return nodes
        nodes.append(reply)
    return nodes


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_pairs_judged_as_turns_land_agree_with_the_plain_reference(data: st.DataObject) -> None:
    """Two traces of a task, the second a copy of the first that may part from it at
    any turn, fed in deltas of any size in any interleaving, either side ending at
    any point: after every delta, the pairs judged are the reference's for what landed."""
    left = data.draw(st.lists(turns, max_size=6), label="left")
    right = [turn if data.draw(st.integers(0, 3), label=f"keep {at}") else data.draw(turns) for at, turn in enumerate(left)]
    right = right[: data.draw(st.integers(0, len(right)), label="right's length")] + data.draw(st.lists(turns, max_size=2), label="right's own")
    nodes = (flat(left), flat(right))
    feed = Feed()
    pairs = TurnPairs(feed.trace(0), feed.trace(1))
    ended = [False, False]
    while not all(ended):
        side = data.draw(st.sampled_from([s for s in (0, 1) if not ended[s]]), label="side")
        left_over = nodes[side][len(feed.sent[side]) :]
        count = data.draw(st.integers(0, len(left_over)), label="nodes")
        if count:
            feed.send(side, left_over[:count])
        elif not left_over or data.draw(st.booleans(), label="ends early"):
            ended[side] = True
        before = list(pairs.kinds)
        pairs.update(*ended)
        assert pairs.kinds[: len(before)] == before, "a pair once judged stays judged"
        assert pairs.kinds == reference_kinds(*feed.sent, (ended[0], ended[1]))


@pytest.mark.parametrize(
    ("left", "right", "kind"),
    [
        ([node("assistant", "x", True, [("f", '{"k": 1, "j": 2}')], "thinking")], [node("assistant", "x", True, [("f", '{"j":2,"k":1}')], "musing")], Difference.SAME),
        ([node("assistant", "x", True, [("f", "{}")])], [node("assistant", "x", True, [("g", "{}")])], Difference.TOOL_CALL),
        ([node("assistant", "x", True, [("f", "{}")])], [node("assistant", "x", True, [("f", "{}"), ("f", "{}")])], Difference.TOOL_CALL),
        ([node("assistant", "x", True, [("f", '{"k": 1}')])], [node("assistant", "y", True, [("f", '{"k": 2}')])], Difference.ARGUMENTS),
        ([node("tool", "1", call_id="a"), node("assistant", "x", True)], [node("tool", "2", call_id="b"), node("assistant", "y", True)], Difference.TOOL_RESULT),
        ([node("user", "hi"), node("assistant", "x", True)], [node("user", "hi"), node("assistant", "y", True)], Difference.TEXT),
        ([node("user", "hi"), node("assistant", "x", True)], [node("user", "hi")], Difference.MISSING),
    ],
)
def test_what_a_pair_differs_by(left: list[dict[str, Any]], right: list[dict[str, Any]], kind: Difference) -> None:
    """Reasoning, call ids, argument spacing and key order do not count; a call's name
    before its arguments, a turn's inputs before its reply; a side that ended without
    the reply lacks it."""
    feed = Feed()
    feed.send(0, left)
    feed.send(1, right)
    pairs = TurnPairs(feed.trace(0), feed.trace(1))
    pairs.update(True, True)
    assert pairs.kinds == [kind]
    assert pairs.differing() == ({} if kind is Difference.SAME else {1: kind})


class Counted(Sequence[Any]):
    """A trace's nodes that count how many are read (each read decodes one)."""

    def __init__(self, nodes: Sequence[Any]) -> None:
        self.inner, self.reads = nodes, 0

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index):  # type: ignore[override]
        self.reads += 1
        return self.inner[index]


class CountedTrace:
    def __init__(self, trace: TraceState) -> None:
        self.trace, self.nodes = trace, Counted(trace.nodes)

    @property
    def sampled(self) -> bytearray:
        return self.trace.sampled


def call_turn(turn: int, argument: int) -> list[dict[str, Any]]:
    return [node("tool", f"result {turn}", call_id=str(turn)), node("assistant", f"step {turn}", True, [("run", json.dumps({"n": argument}))])]


def test_two_long_traces_cost_their_new_turns_not_their_length() -> None:
    """Two 200-turn traces streamed turn by turn, judged at every tick: each node is
    read once, when its pair is whole; a tick with nothing new reads nothing; the
    first difference is found where it is."""
    feed = Feed()
    left, right = CountedTrace(feed.trace(0)), CountedTrace(feed.trace(1))
    pairs = TurnPairs(left, right)
    for turn in range(200):
        feed.send(0, call_turn(turn, turn))
        pairs.update(False, False)
        feed.send(1, call_turn(turn, turn if turn < 120 else -turn))
        for _ in range(3):
            pairs.update(False, False)
    assert len(pairs.kinds) == 200
    assert pairs.first == 121 and pairs.kinds[120] is Difference.ARGUMENTS
    assert len(pairs.differing()) == 80
    assert left.nodes.reads == right.nodes.reads == 400, "every node read once"
    reads = left.nodes.reads + right.nodes.reads
    pairs.update(True, True)
    assert left.nodes.reads + right.nodes.reads == reads, "nothing new: nothing read"


def test_a_turn_waits_for_the_side_still_running_and_ends_with_the_side_that_ended() -> None:
    feed = Feed()
    pairs = TurnPairs(feed.trace(0), feed.trace(1))
    feed.send(0, call_turn(0, 0) + call_turn(1, 1))
    feed.send(1, call_turn(0, 0) + call_turn(1, 1)[:1])
    pairs.update(False, False)
    assert pairs.kinds == [Difference.SAME], "the right's second turn has no reply yet"
    pairs.update(True, False)
    assert pairs.kinds == [Difference.SAME], "the right may still reply"
    pairs.update(True, True)
    assert pairs.kinds == [Difference.SAME, Difference.MISSING], "the right ended without its reply"
    assert turn_starts(feed.trace(0).sampled) == [0, 2]
    assert turn_starts(feed.trace(1).sampled) == [0, 2]
    assert turn_starts(bytearray()) == [] and turn_starts(bytearray([1])) == [0]
