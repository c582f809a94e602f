"""What a delta's values must be before the assembly keeps them: the types every reader
downstream (the store, the headless summary, the transcript, the timing view, the
table, export) relies on, checked once per delta at the boundary.

The rules are explicit checks rather than a pydantic model: a model would copy every
node and its token arrays, and the assembly must keep up with the wire. A value a rule
does not name is kept as it came (a newer server's fields survive), but nothing is
nested deeper than `MAX_DEPTH`, so no reader can meet a RecursionError. Token arrays
(`token_ids`, `logprobs`, ...) are only type-checked at their top: scanning their
elements would cost more than decoding them, and no reader walks them but export,
which has its own depth bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from core.text import short_repr
from core.wire.protocol import PACKED_FIELDS, Packed

MAX_DEPTH = 64
"""Containers inside containers, counted from the delta itself; real deltas stay
under ten, and every recursive reader (JSON, rendering, msgpack) is far deeper."""

MAX_SECONDS = 1e12
"""Times and durations are epoch seconds or spans of them; anything larger (or not
finite) would break the scale a waterfall is drawn to."""

PHASES = ("boot", "setup", "agent", "finalize", "scoring")
TOKEN_COUNTS = ("num_input_tokens", "num_output_tokens", "num_total_tokens")
ARRAY_FIELDS = PACKED_FIELDS | {"routed_experts"}
"""Per-node numeric arrays: a list, its packed bytes (`Packed`), an encoded array (a
map), or nothing."""

NOT_SCALARS = frozenset(
    {"nodes", "calls", "errors", "extra_usage", "request_rewrites", "response_rewrites", "pending"}
)
"""Fields `set` may not overwrite: they are appended to, or replaced by their own key."""


class DeltaValueError(ValueError):
    """A value in a delta that readers cannot use; the message names where."""


def check_delta(delta: Mapping[str, Any], trace_id: str) -> None:
    """Raise `DeltaValueError` naming the first value of `delta` that no reader could
    use; return quietly for every delta a verifiers 0.4.0 server sends."""
    get = delta.get
    where = f"trace {trace_id}"
    header = get("open")
    if isinstance(header, Mapping):
        check_scalars(header, f"{where}: open")
    scalars = get("set")
    if isinstance(scalars, Mapping):
        overwritten = NOT_SCALARS.intersection(scalars)
        if overwritten:
            raise DeltaValueError(f"{where}: 'set' may not overwrite {', '.join(sorted(overwritten))}")
        check_scalars(scalars, f"{where}: set")
    nodes = get("nodes")
    if type(nodes) is list:
        for index, node in enumerate(nodes):
            if isinstance(node, Mapping):
                _check_node(node, f"{where}: nodes[{index}]")
    calls = get("calls")
    if type(calls) is list:
        for index, call in enumerate(calls):
            _check_call(call, f"{where}: calls[{index}]")
    if "pending" in delta:
        pending = get("pending")
        if pending is not None and type(pending) is not list:
            raise DeltaValueError(f"{where}: 'pending' must be a list of messages, got {type(pending).__name__}")
    _check_depth(delta, where)


def check_scalars(scalars: Mapping[str, Any], where: str) -> None:
    """The trace-level values readers compute with: rewards, timing, token counts."""
    get = scalars.get
    rewards = get("rewards")
    if rewards is not None:
        _mapping(rewards, f"{where}.rewards")
        for name, reward in rewards.items():
            if reward is not None:
                _mapping(reward, f"{where}.rewards[{name!r}]")
                _number(reward.get("score"), f"{where}.rewards[{name!r}].score")
                _number(reward.get("weight"), f"{where}.rewards[{name!r}].weight")
    timing = get("timing")
    if timing is not None:
        _mapping(timing, f"{where}.timing")
        _seconds(timing.get("start"), f"{where}.timing.start")
        for phase in PHASES:
            span = timing.get(phase)
            if span is not None:
                _span(span, f"{where}.timing.{phase}")
        agent = timing.get("agent")
        if agent is not None:
            for part in ("model", "harness"):
                if (share := agent.get(part)) is not None:
                    _mapping(share, f"{where}.timing.agent.{part}")
                    _seconds(share.get("duration"), f"{where}.timing.agent.{part}.duration")
    for count in TOKEN_COUNTS:
        value = get(count)
        if value is not None and (type(value) is not int or value < 0):
            raise DeltaValueError(f"{where}.{count} must be a whole number of tokens, got {_shown(value)}")
    agent = get("agent")
    if agent is not None:
        _mapping(agent, f"{where}.agent")


def _check_node(node: Mapping[str, Any], where: str) -> None:
    message = node.get("message")
    if message is not None:
        _mapping(message, f"{where}.message")
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and type(tool_calls) is not list:
            raise DeltaValueError(f"{where}.message.tool_calls must be a list, got {type(tool_calls).__name__}")
    parents = node.get("semantic_parents")
    if parents is not None and type(parents) is not list:
        raise DeltaValueError(f"{where}.semantic_parents must be a list, got {type(parents).__name__}")
    for field in ARRAY_FIELDS.intersection(node):
        value = node[field]
        if value is not None and type(value) not in (list, Packed) and not isinstance(value, Mapping):
            raise DeltaValueError(f"{where}.{field} must be an array, got {type(value).__name__}")


def _check_call(call: Any, where: str) -> None:
    _mapping(call, where)
    node = call.get("node")
    if node is not None and (type(node) is not int or node < 0):
        raise DeltaValueError(f"{where}.node must be a node index or null, got {_shown(node)}")
    span = call.get("time")
    if span is not None:
        _span(span, f"{where}.time")
    usage = call.get("usage")
    if usage is not None:
        _mapping(usage, f"{where}.usage")
        for count in ("prompt_tokens", "completion_tokens"):
            _number(usage.get(count), f"{where}.usage.{count}")


def _span(span: Any, where: str) -> None:
    _mapping(span, where)
    _seconds(span.get("start"), f"{where}.start")
    _seconds(span.get("end"), f"{where}.end")


def _mapping(value: Any, where: str) -> None:
    if not isinstance(value, Mapping):
        raise DeltaValueError(f"{where} must be a map, got {_shown(value)}")


def _number(value: Any, where: str) -> None:
    if value is not None and (type(value) not in (int, float) or not math.isfinite(value)):
        raise DeltaValueError(f"{where} must be a finite number or null, got {_shown(value)}")


def _seconds(value: Any, where: str) -> None:
    _number(value, where)
    if value is not None and abs(value) > MAX_SECONDS:
        raise DeltaValueError(f"{where} must be seconds, got {_shown(value)}")


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {short_repr(value, 40)}"


def _check_depth(delta: Mapping[str, Any], where: str) -> None:
    """No container deeper than `MAX_DEPTH`, without recursing (the point is that a
    hostile delta cannot exhaust the stack) and without scanning token arrays."""
    stack: list[tuple[Any, int]] = []
    push = stack.append
    for key, value in delta.items():
        if key == "nodes" and type(value) is list:
            for node in value:  # depth 3: the delta, its node list, the node
                if isinstance(node, Mapping):
                    for field, item in node.items():
                        if field not in ARRAY_FIELDS and (type(item) is list or isinstance(item, Mapping)):
                            push((item, 4))
        elif type(value) is list or isinstance(value, Mapping):
            push((value, 2))
    _walk(stack, where)


def check_nesting(value: Any, where: str) -> None:
    """`value` (a reply's head, say) holds nothing nested deeper than `MAX_DEPTH`."""
    if type(value) is list or isinstance(value, Mapping):
        _walk([(value, 1)], where)


def _walk(stack: list[tuple[Any, int]], where: str) -> None:
    pop, push = stack.pop, stack.append
    while stack:
        value, depth = pop()
        if depth > MAX_DEPTH:
            raise DeltaValueError(f"{where}: values are nested deeper than {MAX_DEPTH} levels")
        for item in value.values() if isinstance(value, Mapping) else value:
            if type(item) is list or isinstance(item, Mapping):
                push((item, depth + 1))
