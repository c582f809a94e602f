"""The hostile values every boundary is fed: the wire's check (tests/unit/wire/
test_delta_checks.py) and the readers of run folders (tests/integration/
test_hostile_run_dirs.py) draw from the same strategies, so a file can hold nothing
the wire was not tried with.

`NUMBERS` are the numbers a source may send that break arithmetic: infinities, NaN,
the largest and smallest floats (whose squares, exponentials and sums overflow) and
integers past 64 bits."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from tracewatch.core.wire.delta_checks import MAX_DEPTH

NAMES = st.sampled_from([
    "rewards", "timing", "agent", "tools", "score", "weight", "start", "end", "duration", "model", "harness",
    "boot", "setup", "finalize", "scoring", "message", "tool_calls", "semantic_parents", "token_ids", "logprobs",
    "routed_experts", "node", "time", "usage", "prompt_tokens", "completion_tokens", "pending", "nodes", "calls",
    "open", "set", "num_total_tokens", "num_input_tokens", "content", "x", 0, 1,
    "task", "data", "id", "traces", "errors", "env", "name", "ok", "is_timeout", "partial", "tracewatch",
    "mask", "advantages", "trainer_logprobs", "entropies", "metrics", "role",
])  # fmt: skip
"""Keys readers look up, so a drawn key lands where it is read."""
EXTREMES = (
    1e308, 710.0, -1e308, 2**70, math.inf, math.nan, 5e-324, -math.inf, -710.0, -(2**70), 2**64, -(2**63) - 1,
    -5e-324, 1e154, 0.0, -0.0, 2**63, 2**64 - 1, -(2**63), 10**30,
)
"""Most harmful first: hypothesis draws the first items of a list most often."""
NUMBERS = st.sampled_from(EXTREMES) | st.floats() | st.integers(-(2**70), 2**70)
WIRE_NUMBERS = NUMBERS.filter(lambda n: type(n) is float or -(2**63) <= n < 2**64)
"""msgpack carries integers of 64 bits at most: past them only a JSON file can hold."""


@dataclass(frozen=True)
class Values:
    """What one kind of source can carry."""

    numbers: st.SearchStrategy[Any]
    values: st.SearchStrategy[Any]


def _values(numbers: st.SearchStrategy[Any], binary: bool) -> Values:
    scalars = st.none() | st.booleans() | numbers | st.text(max_size=5)
    if binary:
        scalars |= st.binary(max_size=4)
    anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=3), max_leaves=8)
    return Values(numbers, scalars | anything | st.floats(-2e12, 2e12) | st.integers(-3, 3))


WIRE = _values(WIRE_NUMBERS, binary=True)
"""A frame's values (msgpack: bytes, integers of 64 bits)."""
JSON = _values(NUMBERS, binary=False)
"""A JSON line's values (no bytes; integers of any size, NaN and infinities as Python
writes them)."""


def nest(levels: int, kind: str) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value} if kind == "map" else [value]
    return value


def containers(value: Any, depth: int, found: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """Every dict and list inside `value` with its depth (`value` is `depth`)."""
    if type(value) in (dict, list):
        found.append((value, depth))
        for item in value.values() if type(value) is dict else value:
            containers(item, depth + 1, found)
    return found


def numbers_in(value: Any, found: list[tuple[Any, Any]], named: Any = None, names: list[Any] | None = None) -> list[tuple[Any, Any]]:
    """Every (container, key) that holds a number inside `value`; with `names`, also
    the name of the map key each sits under (a token array's item: the array's)."""
    items = value.items() if type(value) is dict else enumerate(value) if type(value) is list else ()
    for key, item in items:
        name = key if type(value) is dict else named
        if type(item) in (int, float):
            found.append((value, key))
            if names is not None:
                names.append(name)
        else:
            numbers_in(item, found, name, names)
    return found


def mutate(draw: st.DrawFn, root: Any, depth: int, kind: Values, room: int = MAX_DEPTH) -> None:
    """Change `root` (at `depth`) once, anywhere: a value replaced or a key added, by a
    wrong-typed value, any value, or one nested to just within or just past `room`
    levels where it lands; or a number it holds replaced by one that breaks
    arithmetic (`NUMBERS`)."""
    numeric = numbers_in(root, [])
    if numeric and draw(st.integers(0, 2)) == 0:
        holder, key = draw(st.sampled_from(numeric))
        holder[key] = draw(kind.numbers)
        return
    target, at = draw(st.sampled_from(containers(root, depth, [])))
    if draw(st.integers(0, 3)) == 0:
        value = nest(max(0, room - at + draw(st.integers(0, 1))), draw(st.sampled_from(["map", "list"])))
    else:
        value = draw(kind.values)
    if type(target) is dict:
        target[draw(st.sampled_from(sorted(map(str, target))) | NAMES) if target else draw(NAMES)] = value
    elif target:
        target[draw(st.integers(0, len(target) - 1))] = value
    else:
        target.append(value)


READ_NUMBERS = ("score", "logprobs", "trainer_logprobs", "reference_logprobs", "advantages", "entropies", "loss_weights",
                "num_total_tokens", "num_input_tokens", "prompt_tokens", "completion_tokens", "duration", "start", "end", "timestamp")  # fmt: skip
"""Numbers views compute with: rewards, token streams, token counts, times."""


@st.composite
def number_themes(draw: st.DrawFn, kind: Values) -> tuple[Any, Any]:
    """Which numbers to replace (one of `READ_NUMBERS`, or None: any) and by what
    (None: a value drawn for each), drawn once for a whole run so that its episodes
    agree: every reward 1e308 in every rollout of a task."""
    wanted = draw(st.sampled_from(("score", "logprobs")) | st.sampled_from((None, *READ_NUMBERS)))  # rewards and logprobs most
    return wanted, draw(st.sampled_from(EXTREMES) | st.none() | kind.numbers if draw(st.booleans()) else st.sampled_from(EXTREMES))


def extreme_numbers(draw: st.DrawFn, root: Any, kind: Values, theme: tuple[Any, Any]) -> None:
    """Numbers in `root` that views compute with (the theme's, or any), many at once,
    replaced by ones that break arithmetic: a whole token stream of 710s, every
    reward 1e308 (their mean and spread overflow)."""
    wanted, same = theme
    names: list[Any] = []
    numeric = numbers_in(root, [], None, names)
    numeric = [spot for spot, name in zip(numeric, names) if wanted is None or name == wanted] or numeric
    if not numeric:
        return
    chosen = numeric if draw(st.booleans()) else draw(st.lists(st.sampled_from(numeric), min_size=1, max_size=40))
    for holder, key in chosen:
        holder[key] = same if same is not None else draw(kind.numbers)
