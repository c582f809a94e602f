"""Trace data to transcript lines: pure functions from nodes, calls, errors and the
pending preview to width-independent lines of (literal text, style key) segments.
Every string from the trace goes through `tracewatch.tui.drawing.literal.safe`; the widget wraps and
styles the result."""

from __future__ import annotations

import json
from typing import Any

from tracewatch.core.run.durations import clock, seconds_text
from tracewatch.core.wire.protocol import WireError, WireMessage, WireModelCall, WireNode, WireToolCall, WireTrace
from tracewatch.tui.drawing.literal import safe, safe_lines
from tracewatch.tui.drawing.numbers import rollout_reward_text

Seg = tuple[str, str]
"""Literal (already safe) text and a style key: the `transcript--<key>` component."""

Logical = tuple[Seg | None, list[Seg], Seg]
"""A width-independent line: gutter, body segments, and what pads it to the width."""

ROLES = ("system", "user", "assistant", "tool")
SPACE: Seg = (" ", "text")
BLANK: Logical = (None, [], SPACE)


def _role_key(role: str) -> str:
    return role if role in ROLES else "other"


def _gutter(key: str) -> Seg:
    return ("▎ ", key)


def _text_lines(text: str, key: str, gutter: Seg, prefix: str = "") -> list[Logical]:
    """Lines of trace text, trailing newlines dropped (tool output ends in one)."""
    return [(gutter, [(prefix + line, key)], SPACE) for line in safe_lines(text.rstrip("\n"))]


def _content_text(content: Any) -> tuple[str, list[str]]:
    """A message's text, and the kinds of its non-text parts (images, audio)."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if isinstance(content, list):
        texts, others = [], []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                others.append(str(part.get("type", "part")) if isinstance(part, dict) else type(part).__name__)
        return "\n".join(texts), others
    return json.dumps(content, ensure_ascii=False, default=str), []


def _tool_call_parts(call: WireToolCall) -> tuple[str, Any]:
    function = call["function"] if isinstance(call.get("function"), dict) else call
    return str(function.get("name") or "?"), function.get("arguments")


def node_head(index: int, node: WireNode, call: WireModelCall | None, turn: int | None, differs: str | None = None) -> list[Logical]:
    """`differs`: how the turn it opens differs from another trace's (side by side),
    marked in the gutter of the turn's rule."""
    message = node.get("message") or {}
    role = str(message.get("role") or "?")
    key = _role_key(role)
    lines: list[Logical] = []
    if turn is not None and differs:
        lines.append((("≠ ", "differs"), [(f"── turn {turn} · {differs} ", "differs")], ("─", "differs")))
    elif turn is not None:
        lines.append((None, [(f"── turn {turn} ", "rule")], ("─", "rule")))
    segs: list[Seg] = [(safe(role), key), (f"  #{index}", "meta")]
    if role == "tool":
        for part in (message.get("name"), message.get("tool_call_id")):
            if part:
                segs.append((" · " + safe(str(part)), "meta"))
    if call is not None:
        segs.extend(_call_meta(call))
    parent = node.get("parent")
    if parent != (index - 1 if index else None):
        segs.append(("  ↳ new root" if parent is None else f"  ↳ branches from #{safe(str(parent))}", "branch"))
    lines.append((_gutter(key), segs, SPACE))
    return lines


def _call_meta(call: WireModelCall) -> list[Seg]:
    segs: list[Seg] = []
    span = call.get("time") or {}
    if span.get("start") and span.get("end"):
        segs.append((" · " + _seconds(span["end"] - span["start"]), "meta"))
    usage = call.get("usage") or {}
    if usage.get("prompt_tokens") is not None or usage.get("completion_tokens") is not None:
        segs.append((f" · {usage.get('prompt_tokens') or 0:,} → {usage.get('completion_tokens') or 0:,} tok", "meta"))
    finish = call.get("finish_reason")
    if finish and finish not in ("stop", "tool_calls"):
        segs.append((" · finish: " + safe(str(finish)), "branch"))
    return segs


def node_body(message: WireMessage) -> list[Logical]:
    key = _role_key(str(message.get("role") or "?"))
    gutter = _gutter(key)
    lines: list[Logical] = []
    reasoning = message.get("reasoning_content")
    if reasoning:
        lines.extend(_text_lines(str(reasoning), "reasoning", gutter))
    text, others = _content_text(message.get("content"))
    if text:
        lines.extend(_text_lines(text, "text", gutter))
    lines.extend((gutter, [(f"‹{safe(kind)}›", "meta")], SPACE) for kind in others)
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            lines.extend(_tool_call_lines(call, gutter))
    if not lines:
        lines.append((gutter, [("(empty)", "meta")], SPACE))
    lines.append(BLANK)
    return lines


def _tool_call_lines(call: WireToolCall, gutter: Seg) -> list[Logical]:
    """Name plus arguments: JSON parsed and shown key by key, strings unquoted and
    multi-line ones below their key; arguments that do not parse are shown raw."""
    name, raw = _tool_call_parts(call)
    head: list[Seg] = [("⚙ ", "call"), (safe(name), "call")]
    if isinstance(raw, str):
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return [(gutter, [*head, ("  " + safe(raw), "text"), ("  (arguments are not JSON)", "meta")], SPACE)]
    else:
        args = raw
    if not isinstance(args, dict):
        return [(gutter, [*head, ("  " + safe(_compact(args)), "text")], SPACE)]
    lines: list[Logical] = []
    inline: list[Seg] = []
    for key, value in args.items():
        text = value if isinstance(value, str) else _compact(value)
        if "\n" in text:
            lines.append((gutter, [(f"    {safe(str(key))}:", "meta")], SPACE))
            lines.extend(_text_lines(text, "text", gutter, "      "))
        else:
            inline += [(f"  {safe(str(key))}: ", "meta"), (safe(text), "text")]
    return [(gutter, head + inline, SPACE), *lines]


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def _error_text(error: WireError | object) -> tuple[str, str]:
    if not isinstance(error, dict):
        return "error", str(error)
    title = str(error.get("type") or "error")
    if error.get("status_code"):
        title += f" {error['status_code']}"
    return title, str(error.get("message") or "")


def failed_lines(call: WireModelCall) -> list[Logical]:
    title, message = _error_text(call.get("error"))
    gutter = _gutter("error")
    span = call.get("time") or {}
    took = f" after {_seconds(span['end'] - span['start'])}" if span.get("start") and span.get("end") else ""
    head = (gutter, [(f"✗ model call failed{took} · ", "error"), (safe(title), "error")], SPACE)
    return [head, *_text_lines(message, "error-text", gutter), BLANK]


def error_lines(error: WireError | object) -> list[Logical]:
    title, message = _error_text(error)
    gutter = _gutter("error")
    lines: list[Logical] = [(gutter, [("✗ trace error · ", "error"), (safe(title), "error")], SPACE)]
    lines += _text_lines(message, "error-text", gutter)
    if isinstance(error, dict) and error.get("traceback"):
        lines += _text_lines(str(error["traceback"]), "meta", gutter)
    return [*lines, BLANK]


OUTCOME_KEYS = ("rewards", "metrics", "ok", "stop_condition", "is_timeout")
"""The trace fields the outcome block shows."""


def outcome_of(record: WireTrace, rollout_reward: tuple[float | None, int] = (None, 0)) -> dict[str, Any] | None:
    """What the outcome block shows, once the trace has a score, metrics or an end
    (rewards arrive seeded with nulls: those alone are no outcome yet); with the
    rollout's reward and how many scored traces it is the mean of, when more than one."""
    rewards = record.get("rewards")
    scored = isinstance(rewards, dict) and any(isinstance(r, dict) for r in rewards.values())
    if not (scored or record.get("metrics") or record.get("stop_condition")):
        return None
    outcome = {key: record.get(key) for key in OUTCOME_KEYS}
    if rollout_reward[1] > 1:
        outcome["rollout_reward"] = rollout_reward
    return outcome


def outcome_lines(outcome: dict[str, Any]) -> list[Logical]:
    """The trace's verdict at its end: each reward (score × weight, and whatever else
    the scorer said), the metrics, how it stopped."""
    gutter: Seg = ("▎ ", "outcome")
    rewards: dict[str, Any] = outcome["rewards"] if isinstance(outcome.get("rewards"), dict) else {}
    scored = [(name, r) for name, r in rewards.items() if isinstance(r, dict)]
    total = sum(_number(r.get("score")) * _number(r.get("weight", 1.0)) for _name, r in scored)
    head = [("━━ outcome", "outcome")]
    shared = outcome.get("rollout_reward")
    if scored and shared:  # one trace of several: its own reward, and the rollout's that the table shows
        head.append((f" · trace reward {total:.2f} · rollout reward {rollout_reward_text(*shared)}", "outcome"))
    elif scored:
        head.append((f" · reward {total:.2f}", "outcome"))
    if outcome.get("ok") is not None:
        head.append((" · ok" if outcome["ok"] else " · not ok", "outcome" if outcome["ok"] else "error"))
    if outcome.get("stop_condition"):
        head.append((f" · {safe(str(outcome['stop_condition']))}", "meta"))
    if outcome.get("is_timeout"):
        head.append((" · timed out", "error"))
    lines: list[Logical] = [(None, [*head, (" ", "outcome")], ("━", "outcome"))]
    for name, reward in rewards.items():
        if not isinstance(reward, dict):
            lines.append((gutter, [(safe(str(name)), "outcome"), ("  not scored", "meta")], SPACE))
            continue
        text = f"  {_number(reward.get('score')):.2f} × {_number(reward.get('weight', 1.0)):g}"
        lines.append((gutter, [(safe(str(name)), "outcome"), (text, "text")], SPACE))
        for key, value in reward.items():
            if key not in ("score", "weight") and value not in (None, "", {}, []):
                shown = value if isinstance(value, str) else _compact(value)
                lines += _text_lines(shown, "text", gutter, prefix=f"  {safe(str(key))}: ")
    metrics = outcome.get("metrics")
    if isinstance(metrics, dict) and metrics:
        parts = safe(" · ".join(f"{k} {f'{v:g}' if isinstance(v, float) else _compact(v)}" for k, v in metrics.items()))
        lines.append((gutter, [("metrics  ", "meta"), (parts, "text")], SPACE))
    return [*lines, BLANK]


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def pending_title(since: float | None, now: float) -> Logical:
    """With no `since` the rollout ended (cancelled, failed) before the model replied."""
    state = "no reply came" if since is None else "awaiting reply · " + clock(now - since)
    return (None, [(f"┏━ pending · sent to the model, {state} ", "pending-title")], ("━", "pending-title"))


def pending_body(messages: list[WireMessage]) -> list[Logical]:
    gutter: Seg = ("┃ ", "pending-title")
    lines: list[Logical] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        if lines:  # a blank line between messages, inside the frame
            lines.append((gutter, [], SPACE))
        role = str(message.get("role") or "?")
        head: list[Seg] = [(safe(role), _role_key(role))]
        for part in (message.get("name"), message.get("tool_call_id")):
            if part:
                head.append((" · " + safe(str(part)), "meta"))
        lines.append((gutter, head, SPACE))
        text, others = _content_text(message.get("content"))
        lines += _text_lines(text, "text", gutter) if text else []
        lines += [(gutter, [(f"‹{safe(kind)}›", "meta")], SPACE) for kind in others]
    lines.append((None, [("┗", "pending-title")], ("━", "pending-title")))
    return lines


def copy_text(kind: str, source: Any) -> str:
    """A block's raw text, as the trace holds it: what a copy key copies."""
    if kind == "node":
        node: WireNode = source[1]
        message = node.get("message") or {}
        text = _content_text(message.get("content"))[0]
        calls = [
            f"{name} {raw if isinstance(raw, str) else _compact(raw)}"
            for name, raw in (_tool_call_parts(c) for c in message.get("tool_calls") or () if isinstance(c, dict))
        ]
        return "\n".join(part for part in (text, *calls) if part)
    if kind == "pending":
        return "\n\n".join(_content_text(m.get("content"))[0] for m in source[0] if isinstance(m, dict))
    if kind == "outcome":
        return json.dumps(source, ensure_ascii=False, default=str, indent=2)
    error = source.get("error") if kind == "failed" else source
    title, detail = _error_text(error)
    return f"{title}: {detail}"


def slice_segs(segs: list[Seg], start: int, end: int) -> list[Seg]:
    """The part of a run of segments between two character offsets."""
    out: list[Seg] = []
    position = 0
    for text, key in segs:
        after = position + len(text)
        if after > start and position < end:
            out.append((text[max(0, start - position) : end - position], key))
        position = after
        if position >= end:
            break
    return out


def _seconds(seconds: float) -> str:
    if seconds < 10:
        return seconds_text(seconds, 2)
    if seconds < 60:
        return seconds_text(seconds)
    return clock(seconds)
