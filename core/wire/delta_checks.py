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

One pass checks types and depth together: a value a rule names is type-checked
where it is (a timing span's start and end, say) and only what no rule names is
walked for depth, with exact `type(x) is` tests (decoded frames hold only dicts,
lists and scalars; an ABC check per value would cost more than the rest). The path
to a bad value is spelled out only when one is found.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from tracewatch.core.errors import TracewatchError
from tracewatch.core.text import short_repr
from tracewatch.core.wire.protocol import AGENT_PARTS, LIST_FIELDS, PACKED_FIELDS, PHASES, KeptItems, Packed

MAX_DEPTH = 64
"""Containers inside containers, counted from the delta itself; real deltas stay
under ten, and every recursive reader (JSON, rendering, msgpack) is far deeper."""

MAX_SECONDS = 1e12
"""Times and durations are epoch seconds or spans of them; anything larger (or not
finite) would break the scale a waterfall is drawn to."""

TOKEN_COUNTS = ("num_input_tokens", "num_output_tokens", "num_total_tokens")
ARRAY_FIELDS = PACKED_FIELDS | {"routed_experts"}
"""Per-node numeric arrays: a list, its packed bytes (`Packed`), an encoded array (a
map), or nothing."""

NOT_SCALARS = frozenset({*LIST_FIELDS, "pending"})
"""Fields `set` may not overwrite: they are appended to, or replaced by their own key."""


class DeltaValueError(TracewatchError, ValueError):
    """A value in a delta that readers cannot use; the message names where."""


class _Invalid(TracewatchError):
    """A bad value found below the delta; `check_delta` adds which trace it is in."""


def check_delta(delta: Mapping[str, Any], trace_id: str) -> None:
    """Raise `DeltaValueError` naming a value of `delta` that no reader could use;
    return quietly for every delta a verifiers 0.4.0 server sends."""
    try:
        for key, value in delta.items():
            rule = _DELTA_RULES.get(key)
            if rule is not None:
                rule(value)
            elif (type(value) is dict or type(value) is list) and _exceeds(value, MAX_DEPTH - 2):
                _too_deep(key)
    except _Invalid as invalid:
        raise DeltaValueError(f"trace {trace_id}: {invalid}") from None


def check_scalars(scalars: Mapping[str, Any], where: str) -> None:
    """The trace-level values readers compute with (rewards, timing, token counts),
    and nothing nested deeper than in a delta's `set`, for a `set` read from somewhere
    else (a recording's index: usable exactly when the live check kept it); `where`
    leads the message."""
    try:
        _trace_scalars(scalars, where)
    except _Invalid as invalid:
        raise DeltaValueError(str(invalid)) from None


def check_nesting(value: Any, where: str) -> None:
    """`value` (a reply's head, say) holds nothing nested deeper than `MAX_DEPTH`."""
    if type(value) in _CONTAINERS and _exceeds(value, MAX_DEPTH - 1):
        raise DeltaValueError(f"{where}: {_TOO_DEEP}")


_TOO_DEEP = f"values are nested deeper than {MAX_DEPTH} levels"
_CONTAINERS = (dict, list)
_INF = math.inf


def _open(header: Any) -> None:
    if type(header) is dict:
        _trace_scalars(header, "open")
    elif type(header) is list and _exceeds(header, MAX_DEPTH - 2):
        _too_deep("open")


def _set(scalars: Any) -> None:
    if type(scalars) is dict:
        if not NOT_SCALARS.isdisjoint(scalars):
            raise _Invalid(f"'set' may not overwrite {', '.join(sorted(NOT_SCALARS.intersection(scalars)))}")
        _trace_scalars(scalars, "set")
    elif type(scalars) is list and _exceeds(scalars, MAX_DEPTH - 2):
        _too_deep("set")


def _pending(pending: Any) -> None:
    if type(pending) is list:
        if _exceeds(pending, MAX_DEPTH - 2):
            _too_deep("pending")
    elif pending is not None:
        raise _Invalid(f"'pending' must be a list of messages, got {type(pending).__name__}")


def _nodes(nodes: Any) -> None:
    if type(nodes) is KeptItems or type(nodes) is list:
        for index, node in enumerate(nodes):
            if type(node) is dict:  # any other item fails the assembly by itself
                _node(node, index)
    elif type(nodes) is dict and _exceeds(nodes, MAX_DEPTH - 2):
        _too_deep("nodes")


def _calls(calls: Any) -> None:
    if type(calls) is KeptItems or type(calls) is list:
        for index, call in enumerate(calls):
            _call(call, index)
    elif type(calls) is dict and _exceeds(calls, MAX_DEPTH - 2):
        _too_deep("calls")


_DELTA_RULES: dict[str, Callable[[Any], None]] = {
    "open": _open,
    "set": _set,
    "pending": _pending,
    "nodes": _nodes,
    "calls": _calls,
}
"""What each key of a delta must hold; any other key's value is only depth-bounded."""


def _trace_scalars(scalars: Mapping[str, Any], field: str) -> None:
    """`open` or `set` (`field`): a map at depth 2, so its values are at depth 3."""
    for key, value in scalars.items():
        rule = _SCALAR_RULES.get(key)
        if rule is not None:
            rule(value, field, key)
        elif (type(value) is dict or type(value) is list) and _deeper(value, MAX_DEPTH - 3, key):
            _too_deep(field, key)


def _tokens(value: Any, field: str, key: str) -> None:
    if value is not None and (type(value) is not int or value < 0):
        raise _Invalid(f"{_path(field, key)} must be a whole number of tokens, got {_shown(value)}")


def _agent(agent: Any, field: str, key: str) -> None:
    if agent is not None:
        if type(agent) is not dict:
            _not_a_map(agent, field, key)
        if _deeper(agent, MAX_DEPTH - 3, key):
            _too_deep(field, key)


_REWARD_KEYS = frozenset({"score", "weight"})


def _rewards(rewards: Any, field: str, key: str) -> None:
    if rewards is None:
        return
    if type(rewards) is not dict:
        _not_a_map(rewards, field, key)
    for name, reward in rewards.items():
        if reward is None:
            continue
        if type(reward) is not dict:
            _not_a_map(reward, field, key, name)
        score = reward.get("score")
        if not (score is None or type(score) is float and -_INF < score < _INF or type(score) is int):
            _not_a_number(score, field, key, name, "score")
        weight = reward.get("weight")
        if not (weight is None or type(weight) is float and -_INF < weight < _INF or type(weight) is int):
            _not_a_number(weight, field, key, name, "weight")
        if not reward.keys() <= _REWARD_KEYS and _exceeds(reward, MAX_DEPTH - 4):
            _too_deep(field, key, name)


_SPAN_KEYS = frozenset({"start", "end"})
_AGENT_SPAN_KEYS = _SPAN_KEYS | set(AGENT_PARTS)
_SHARE_KEYS = frozenset({"duration"})
_TIMING_KEYS = frozenset({"start", *PHASES})


def _timing(timing: Any, field: str, key: str) -> None:
    """Times at depth 4 (`start`), spans at 4 and their times at 5, the agent span's
    shares at 5 and their durations at 6."""
    if timing is None:
        return
    if type(timing) is not dict:
        _not_a_map(timing, field, key)
    start = timing.get("start")
    if start is not None and not (type(start) is float and -MAX_SECONDS <= start <= MAX_SECONDS):
        _check_seconds(start, field, key, "start")
    for phase in PHASES:
        span = timing.get(phase)
        if span is None:
            continue
        if type(span) is not dict:
            _not_a_map(span, field, key, phase)
        start, end = span.get("start"), span.get("end")
        if start is not None and not (type(start) is float and -MAX_SECONDS <= start <= MAX_SECONDS):
            _check_seconds(start, field, key, phase, "start")
        if end is not None and not (type(end) is float and -MAX_SECONDS <= end <= MAX_SECONDS):
            _check_seconds(end, field, key, phase, "end")
        if phase == "agent":
            _agent_shares(span, field, key)
        elif not span.keys() <= _SPAN_KEYS and _exceeds(span, MAX_DEPTH - 4):
            _too_deep(field, key, phase)
    if not timing.keys() <= _TIMING_KEYS and _free_exceeds(timing, PHASES, MAX_DEPTH - 3):
        _too_deep(field, key)


def _agent_shares(span: dict[str, Any], field: str, key: str) -> None:
    """The agent span's shares (`AGENT_PARTS`) at depth 5, their durations at 6."""
    for part in AGENT_PARTS:
        share = span.get(part)
        if share is None:
            continue
        if type(share) is not dict:
            _not_a_map(share, field, key, "agent", part)
        duration = share.get("duration")
        if duration is not None and not (type(duration) is float and -MAX_SECONDS <= duration <= MAX_SECONDS):
            _check_seconds(duration, field, key, "agent", part, "duration")
        if not share.keys() <= _SHARE_KEYS and _exceeds(share, MAX_DEPTH - 5):
            _too_deep(field, key, "agent", part)
    if not span.keys() <= _AGENT_SPAN_KEYS and _free_exceeds(span, AGENT_PARTS, MAX_DEPTH - 4):
        _too_deep(field, key, "agent")


_SCALAR_RULES: dict[str, Callable[[Any, str, str], None]] = {
    "rewards": _rewards,
    "timing": _timing,
    "agent": _agent,
    **dict.fromkeys(TOKEN_COUNTS, _tokens),
}
"""What the values of `open` and `set` that readers compute with must be."""


_ARRAY_TYPES = (list, dict, Packed, type(None))
_NODE_RULED = frozenset({"message", "semantic_parents", *ARRAY_FIELDS})

_NODE_SHAPES: dict[tuple[tuple[Any, ...], tuple[type, ...]], tuple[Any, ...]] = {}
"""Per node shape that passed (its keys, and the types of their values, in order): the
fields to walk for depth. A server sends a handful of shapes, and a node of a known
shape needs no test field by field (its token arrays' types are the shape's)."""
_SHAPES_KEPT = 256
_SHAPE_KEYS = 64
"""At most this many shapes are kept, each of at most this many keys: a hostile
server cannot grow the memo."""


def _node(node: dict[str, Any], index: int) -> None:
    """A node at depth 3: its fields at 4, a message's own fields at 5."""
    message = node.get("message")
    if message is not None:
        if type(message) is not dict:
            _not_a_map(message, "nodes", index, "message")
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and type(tool_calls) is not list:
            raise _Invalid(f"{_path('nodes', index, 'message', 'tool_calls')} must be a list, got {type(tool_calls).__name__}")
        if _exceeds(message, MAX_DEPTH - 4):
            _too_deep("nodes", index, "message")
    parents = node.get("semantic_parents")
    if parents is not None:
        if type(parents) is not list:
            raise _Invalid(f"{_path('nodes', index, 'semantic_parents')} must be a list, got {type(parents).__name__}")
        if parents and _exceeds(parents, MAX_DEPTH - 4):
            _too_deep("nodes", index, "semantic_parents")
    shape = (tuple(node), tuple(map(type, node.values())))
    walked = _NODE_SHAPES.get(shape)
    if walked is None:
        walked = _node_fields(node, index)
        if len(_NODE_SHAPES) < _SHAPES_KEPT and len(node) <= _SHAPE_KEYS:
            _NODE_SHAPES[shape] = walked
    for field in walked:
        if _deeper(node[field], MAX_DEPTH - 4, field):
            _too_deep("nodes", index, field)


def _node_fields(node: dict[str, Any], index: int) -> tuple[Any, ...]:
    """The node's fields no rule names that hold containers (an encoded array, a map,
    is walked too: it is small); raise for a token array that is not an array."""
    walked = []
    for field, value in node.items():
        if type(value) is list:
            if field not in _NODE_RULED:
                walked.append(field)
        elif type(value) is dict:
            if field != "message":
                walked.append(field)
        elif field in ARRAY_FIELDS and type(value) not in _ARRAY_TYPES:
            raise _Invalid(f"{_path('nodes', index, field)} must be an array, got {type(value).__name__}")
    return tuple(walked)


def _call(call: Any, index: int) -> None:
    """A model call at depth 3: its fields at 4."""
    if type(call) is not dict:
        _not_a_map(call, "calls", index)
    node = call.get("node")
    if node is not None and (type(node) is not int or node < 0):
        raise _Invalid(f"{_path('calls', index, 'node')} must be a node index or null, got {_shown(node)}")
    span = call.get("time")
    if span is not None:
        if type(span) is not dict:
            _not_a_map(span, "calls", index, "time")
        start, end = span.get("start"), span.get("end")
        if start is not None and not (type(start) is float and -MAX_SECONDS <= start <= MAX_SECONDS):
            _check_seconds(start, "calls", index, "time", "start")
        if end is not None and not (type(end) is float and -MAX_SECONDS <= end <= MAX_SECONDS):
            _check_seconds(end, "calls", index, "time", "end")
    usage = call.get("usage")
    if usage is not None:
        if type(usage) is not dict:
            _not_a_map(usage, "calls", index, "usage")
        for name in ("prompt_tokens", "completion_tokens"):
            count = usage.get(name)
            if not (count is None or type(count) is float and -_INF < count < _INF or type(count) is int):
                _not_a_number(count, "calls", index, "usage", name)
    if _exceeds(call, MAX_DEPTH - 3):
        _too_deep("calls", index)


def _check_seconds(value: Any, *where: Any) -> None:
    """The slow half of a seconds test (the fast half, a float in range, is inline):
    an int in range passes; anything else is named."""
    if type(value) is int and -MAX_SECONDS <= value <= MAX_SECONDS:
        return
    raise _Invalid(f"{_path(*where)} must be seconds (a finite number) or null, got {_shown(value)}")


def _too_deep(*where: Any) -> NoReturn:
    path = _path(*where)
    raise _Invalid(f"{path}: {_TOO_DEEP}" if path else _TOO_DEEP)


def _not_a_map(value: Any, *where: Any) -> NoReturn:
    raise _Invalid(f"{_path(*where)} must be a map, got {_shown(value)}")


def _not_a_number(value: Any, *where: Any) -> NoReturn:
    raise _Invalid(f"{_path(*where)} must be a finite number or null, got {_shown(value)}")


def _path(*parts: Any) -> str:
    """Where a value is, as "set.rewards['r'].score" (an empty part is left out)."""
    text = ""
    for part in parts:
        if part == "" or part is None:
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {short_repr(value, 40)}"


_REPEATED = frozenset({"agent", "tools", "verifiers"})
"""Fields whose value is (nearly) the same in every rollout of a served env: its agent
config, tool list (sent in each rollout's first `set` and its first node) and
verifiers version."""

_PASSED: dict[str, tuple[int, Any]] = {}
"""Per repeated field, the last value that passed and the room it had. A value equal
to it (one comparison at C speed, which stops at the first difference) has the same
nesting, so it needs no walk; of a map, only the entries that differ are walked (an
agent config differs from the last in its runtime's id). Decoded frames hold only
plain values, whose equality means equal structure."""


def _deeper(value: Any, room: int, key: Any) -> bool:
    """`_exceeds`, walking of a repeated field's value only what differs from the last
    value that passed with no more room."""
    if key not in _REPEATED:
        return _exceeds(value, room)
    passed = _PASSED.get(key)
    if passed is None or passed[0] > room:
        exceeds = _exceeds(value, room)
    elif passed[1] == value:
        return False
    elif type(value) is dict and type(passed[1]) is dict:
        last = passed[1]
        exceeds = any(
            (type(item) is dict or type(item) is list) and (room == 0 or _exceeds(item, room - 1))
            for name, item in value.items()
            if item != last.get(name)
        )
    else:
        exceeds = _exceeds(value, room)
    if not exceeds:
        _PASSED[key] = (room, value)
    return exceeds


def _free_exceeds(container: dict[str, Any], ruled: tuple[str, ...], room: int) -> bool:
    """`_exceeds` for the values of `container` whose keys are not in `ruled` (those
    were checked where they are)."""
    return any(
        (type(item) is dict or type(item) is list) and (room == 0 or _exceeds(item, room - 1))
        for key, item in container.items()
        if key not in ruled
    )


def _exceeds(container: Any, room: int) -> bool:
    """Whether `container` holds containers more than `room` levels below it. Each
    call looks two levels down (most containers hold only scalars: no call for
    them), so the recursion is at most `room / 2` deep whatever the input: a hostile
    value cannot exhaust the stack."""
    for item in container.values() if type(container) is dict else container:
        if type(item) is dict:
            if room == 0:
                return True
            for inner in item.values():
                if (type(inner) is dict or type(inner) is list) and (room == 1 or _exceeds(inner, room - 2)):
                    return True
        elif type(item) is list:
            if room == 0:
                return True
            for inner in item:
                if (type(inner) is dict or type(inner) is list) and (room == 1 or _exceeds(inner, room - 2)):
                    return True
    return False
