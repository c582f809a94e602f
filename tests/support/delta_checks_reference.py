"""The boundary check as first written (`tracewatch.core.wire.delta_checks` before its fast
rewrite): a typed pass over what readers use, then a separate walk of every container
for depth. Kept only as the oracle the fast check is held to (tests/unit/wire/test_delta_checks.py):
both must reject exactly the same deltas."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tracewatch.core.text import short_repr
from tracewatch.core.wire.delta_checks import (
    ARRAY_FIELDS,
    MAX_DEPTH,
    MAX_SECONDS,
    NOT_SCALARS,
    TOKEN_COUNTS,
    DeltaValueError,
)
from tracewatch.core.wire.protocol import AGENT_PARTS, PHASES, Packed


def check_delta(delta: Mapping[str, Any], trace_id: str) -> None:
    """Raise `DeltaValueError` naming the first value of `delta` that no reader could
    use; return quietly for every delta a verifiers 0.4.0 server sends. Where a value
    is (its path) is spelled out only for the message: building it for every value
    would cost more than checking."""
    get = delta.get
    head = f"trace {trace_id}: "
    header = get("open")
    if type(header) is dict:
        _check_scalars(header, head, "open")
    scalars = get("set")
    if type(scalars) is dict:
        if not NOT_SCALARS.isdisjoint(scalars):
            overwritten = ", ".join(sorted(NOT_SCALARS.intersection(scalars)))
            raise DeltaValueError(f"trace {trace_id}: 'set' may not overwrite {overwritten}")
        _check_scalars(scalars, head, "set")
    nodes = get("nodes")
    if type(nodes) is list:
        for index, node in enumerate(nodes):
            if type(node) is dict:
                _check_node(node, head, index)
    calls = get("calls")
    if type(calls) is list:
        for index, call in enumerate(calls):
            _check_call(call, head, index)
    if "pending" in delta:
        pending = get("pending")
        if pending is not None and type(pending) is not list:
            raise DeltaValueError(f"trace {trace_id}: 'pending' must be a list of messages, got {type(pending).__name__}")
    _check_depth(delta, f"trace {trace_id}")


def check_scalars(scalars: Mapping[str, Any], where: str) -> None:
    """The trace-level values readers compute with (rewards, timing, token counts),
    for a `set` read from somewhere else (a recording); `where` leads the message."""
    _check_scalars(scalars, "", where)


def _check_scalars(scalars: Mapping[str, Any], head: str, field: str) -> None:
    get = scalars.get
    rewards = get("rewards")
    if rewards is not None:
        _mapping(rewards, head, field, "rewards")
        for name, reward in rewards.items():
            if reward is not None:
                _mapping(reward, head, field, "rewards", name)
                _number(reward.get("score"), head, field, "rewards", name, "score")
                _number(reward.get("weight"), head, field, "rewards", name, "weight")
    timing = get("timing")
    if timing is not None:
        _mapping(timing, head, field, "timing")
        _seconds(timing.get("start"), head, field, "timing", "start")
        for phase in PHASES:
            span = timing.get(phase)
            if span is not None:
                _span(span, head, field, "timing", phase)
        agent = timing.get("agent")
        if agent is not None:
            for part in AGENT_PARTS:
                if (share := agent.get(part)) is not None:
                    _mapping(share, head, field, "timing", "agent", part)
                    _seconds(share.get("duration"), head, field, "timing", "agent", part, "duration")
    for count in TOKEN_COUNTS:
        value = get(count)
        if value is not None and (type(value) is not int or value < 0):
            raise DeltaValueError(f"{_path(head, field, count)} must be a whole number of tokens, got {_shown(value)}")
    agent = get("agent")
    if agent is not None:
        _mapping(agent, head, field, "agent")


def _check_node(node: Mapping[str, Any], head: str, index: int) -> None:
    message = node.get("message")
    if message is not None:
        _mapping(message, head, "nodes", index, "message")
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and type(tool_calls) is not list:
            where = _path(head, "nodes", index, "message", "tool_calls")
            raise DeltaValueError(f"{where} must be a list, got {type(tool_calls).__name__}")
    parents = node.get("semantic_parents")
    if parents is not None and type(parents) is not list:
        where = _path(head, "nodes", index, "semantic_parents")
        raise DeltaValueError(f"{where} must be a list, got {type(parents).__name__}")
    for field in ARRAY_FIELDS.intersection(node):
        value = node[field]
        if value is not None and type(value) not in (list, dict, Packed):
            raise DeltaValueError(f"{_path(head, 'nodes', index, field)} must be an array, got {type(value).__name__}")


def _check_call(call: Any, head: str, index: int) -> None:
    _mapping(call, head, "calls", index)
    node = call.get("node")
    if node is not None and (type(node) is not int or node < 0):
        raise DeltaValueError(f"{_path(head, 'calls', index, 'node')} must be a node index or null, got {_shown(node)}")
    span = call.get("time")
    if span is not None:
        _span(span, head, "calls", index, "time")
    usage = call.get("usage")
    if usage is not None:
        _mapping(usage, head, "calls", index, "usage")
        _number(usage.get("prompt_tokens"), head, "calls", index, "usage", "prompt_tokens")
        _number(usage.get("completion_tokens"), head, "calls", index, "usage", "completion_tokens")


def _span(span: Any, *where: Any) -> None:
    _mapping(span, *where)
    _seconds(span.get("start"), *where, "start")
    _seconds(span.get("end"), *where, "end")


def _mapping(value: Any, *where: Any) -> None:
    if type(value) is not dict:  # decoded frames hold dicts; an ABC check costs more
        raise DeltaValueError(f"{_path(*where)} must be a map, got {_shown(value)}")


def _number(value: Any, *where: Any) -> None:
    if value is not None and (type(value) not in (int, float) or not math.isfinite(value)):
        raise DeltaValueError(f"{_path(*where)} must be a finite number or null, got {_shown(value)}")


def _seconds(value: Any, *where: Any) -> None:
    if value is not None and (type(value) not in (int, float) or not -MAX_SECONDS <= value <= MAX_SECONDS):
        raise DeltaValueError(f"{_path(*where)} must be seconds (a finite number) or null, got {_shown(value)}")


def _path(head: str, *parts: Any) -> str:
    """Where a value is, as "trace T: set.rewards['r'].score": `head`, then the parts
    that lead there (a None part is left out)."""
    text = ""
    for part in parts:
        if part is None:
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return head + text


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {short_repr(value, 40)}"


def _check_depth(delta: Mapping[str, Any], where: str) -> None:
    """No container deeper than `MAX_DEPTH` (the delta is depth 1), not counting the
    nodes' token arrays. Decoded frames hold only dicts and lists, so exact type
    tests suffice (an ABC check per value would cost more than the rest)."""
    nodes = delta.get("nodes")
    nodes = nodes if type(nodes) is list else None
    for value in delta.values():
        if type(value) in _CONTAINERS and value is not nodes and _exceeds(value, MAX_DEPTH - 2):
            raise DeltaValueError(f"{where}: values are nested deeper than {MAX_DEPTH} levels")
    for node in nodes or ():  # depth 3: what is under it counts, its token lists do not
        if type(node) is dict:
            for field, item in node.items():
                scanned = field not in ARRAY_FIELDS or type(item) is dict  # an encoded array is small
                if type(item) in _CONTAINERS and scanned and _exceeds(item, MAX_DEPTH - 4):
                    raise DeltaValueError(f"{where}: values are nested deeper than {MAX_DEPTH} levels")


def check_nesting(value: Any, where: str) -> None:
    """`value` (a reply's head, say) holds nothing nested deeper than `MAX_DEPTH`."""
    if type(value) in _CONTAINERS and _exceeds(value, MAX_DEPTH - 1):
        raise DeltaValueError(f"{where}: values are nested deeper than {MAX_DEPTH} levels")


_CONTAINERS = (dict, list)


def _exceeds(container: Any, room: int) -> bool:
    """Whether `container` holds containers more than `room` levels below it. The
    recursion is at most `room` deep (never more than `MAX_DEPTH`), whatever the
    input: a hostile value cannot exhaust the stack."""
    for item in container.values() if type(container) is dict else container:
        if type(item) in _CONTAINERS and (room == 0 or _exceeds(item, room - 1)):
            return True
    return False
