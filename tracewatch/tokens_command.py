"""`tracewatch tokens`: a rollout's messages token by token, for scripts and CI, with
the values the token view shows (`tracewatch.core.tokens.streams.token_values`) from a recording,
a run directory or a traces JSONL file.

`table` is for a reader (token text made visible as the view shows it); `jsonl` is one
object per message (its summary and findings) then one per token, with non-finite
numbers written as the strings "NaN", "inf" and "-inf" so that no value is lost and
every line is strict JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tracewatch.core.demo import TOKENIZERS as DEMO_TOKENIZERS
from tracewatch.core.errors import TracewatchError
from tracewatch.core.paths import RECORDING_SUFFIX
from tracewatch.core.session.session import Session
from tracewatch.core.session.trace_state import TraceState
from tracewatch.core.text import say
from tracewatch.core.tokens.streams import MessageTokens, read_message, token_values
from tracewatch.core.tokens.summary import summarize
from tracewatch.core.tokens.tokenizer import Piece, Tokenizers
from tracewatch.tui.drawing.literal import safe
from tracewatch.tui.tokens.token_layout import id_piece

MATCHES_SHOWN = 5
"""The traces an ambiguous prefix names (the rest are counted)."""


class NoSuchRollout(TracewatchError):
    """The source holds no rollout (or trace) by that id."""


def open_source(path: Path) -> Session:
    from tracewatch.core.engine.opened import OpenedRecording, open_folder  # offline only

    return OpenedRecording(path) if path.suffix == RECORDING_SUFFIX else open_folder(path)


def find_traces(session: Session, wanted: str) -> tuple[str, list[TraceState]]:
    """The rollout `wanted` names (its key, one of its trace ids, or a unique prefix of
    one, as the table shows a trace's first 8 characters) and its traces, or only that
    trace when a trace id named it. A prefix of several traces names them all, so the
    user can pick."""
    store = session.store
    key, trace_id = (wanted, None) if wanted in store.rollouts else _by_trace(session, wanted)
    session.select(key)
    traces = list(store.rollouts[key].traces.values())
    named = [trace for trace in traces if trace.id == trace_id]
    return key, named or traces


def _by_trace(session: Session, wanted: str) -> tuple[str, str]:
    """The rollout and trace whose id is `wanted`, or starts with it and no other does."""
    rollouts = session.store.rollouts
    found = {(trace, key) for key, rollout in rollouts.items() for trace in rollout.trace_ids if trace.startswith(wanted)} if wanted else set()
    exact = {(trace, key) for trace, key in found if trace == wanted}
    if len(exact or found) == 1:
        trace, key = next(iter(exact or found))
        return key, trace
    if found:
        shown = sorted(found)[:MATCHES_SHOWN]
        more = f", and {len(found) - len(shown)} more" if len(found) > len(shown) else ""
        named = ", ".join(f"{trace} ({key})" for trace, key in shown)
        raise NoSuchRollout(f"{wanted!r} starts {len(found)} traces: {named}{more}; give more of the trace id, or the rollout's key")
    known = ", ".join(list(rollouts)[:5])
    raise NoSuchRollout(f"no rollout or trace {wanted!r} in this source (rollouts: {known}{', ...' if len(rollouts) > 5 else ''})")


def finite(value: Any) -> Any:
    """`value` with every non-finite float in it, at any depth, as its string."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {name: finite(item) for name, item in value.items()}
    if isinstance(value, list):
        return [finite(item) for item in value]
    return value


def messages(traces: list[TraceState], node: int | None) -> Iterator[tuple[TraceState, int, Any, MessageTokens]]:
    """Each message to print: its trace, index, role and tokens."""
    for trace in traces:
        nodes = trace.nodes
        indexes = [node] if node is not None else range(len(nodes))
        for index in indexes:
            if not 0 <= index < len(nodes):
                raise NoSuchRollout(f"trace {trace.id} has {len(nodes)} nodes; there is no node {index}")
            raw = nodes[index]
            tokens = read_message(raw)
            if node is not None or len(tokens) or tokens.findings:
                message = raw.get("message") if isinstance(raw, dict) else None
                yield trace, index, message.get("role") if isinstance(message, dict) else None, tokens


def print_tokens(args: argparse.Namespace) -> int:
    out = sys.stdout
    session = open_source(args.source)
    key, traces = find_traces(session, args.rollout)
    variant = session.store.rollouts[key].variant
    view = session.variants.get(variant)
    text, note = Tokenizers(args.tokenizer, by_model=DEMO_TOKENIZERS).for_variant(variant, view.model if view is not None else None)
    if text is None and args.format == "table":
        say(sys.stderr, f"note: {note}")
    shown = 0
    for trace, index, role, tokens in messages(traces, args.node):
        ids: list[int] = tokens.ids.tolist()
        pieces = text.pieces(ids) if text is not None else [id_piece(token) for token in ids]
        if args.format == "jsonl":
            _jsonl(out, key, trace.id, index, role, tokens, pieces)
        else:
            _table(out, key, trace.id, index, role, tokens, pieces)
        shown += 1
    if not shown:
        say(sys.stderr, f"rollout {key}: no message carries token ids")
    return 0


def _jsonl(out: IO[str], key: str, trace: str, index: int, role: Any, tokens: MessageTokens, pieces: list[Piece]) -> None:
    summary = summarize(tokens)
    where = {"rollout": key, "trace": trace, "node": index}
    head = {
        "kind": "message", **where, "role": role, "tokens": summary.tokens, "trained": summary.trained,
        "content": summary.content, "mean_logprob": summary.mean_logprob,
        "lowest_logprob": None if summary.lowest_logprob is None else vars(summary.lowest_logprob),
        "worst_mismatch": None if summary.worst_mismatch is None else vars(summary.worst_mismatch),
        "findings": list(summary.findings),
    }
    out.write(json.dumps(finite(head), allow_nan=False) + "\n")  # a worst mismatch of 1e308 - -1e308 is inf
    for position, piece in enumerate(pieces):
        row = {"kind": "token", **where, **token_values(tokens, position), "text": piece.text, "special": piece.special}
        out.write(json.dumps({name: finite(value) for name, value in row.items()}, allow_nan=False) + "\n")


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _table(out: IO[str], key: str, trace: str, index: int, role: Any, tokens: MessageTokens, pieces: list[Piece]) -> None:
    summary = summarize(tokens)
    out.write(f"# {safe(key)} · trace {safe(trace)} · {safe(str(role))} #{index} · {summary.tokens} tokens · {summary.trained} trained")
    if summary.mean_logprob is not None:
        out.write(f" · mean logprob {summary.mean_logprob:.4f}")
    out.write("\n")
    for finding in summary.findings:
        out.write(f"# ! {safe(finding)}\n")
    if not len(tokens):
        return
    rows = [token_values(tokens, position) for position in range(len(tokens))]
    names = [name for name in rows[0] if name not in ("index", "id")]
    out.write("\t".join(["index", "id", "text", *(safe(name) for name in names)]) + "\n")
    for row, piece in zip(rows, pieces):
        text = safe(piece.text) if piece.special else safe(json.dumps(piece.text, ensure_ascii=False))
        out.write("\t".join([str(row["index"]), str(row["id"]), text, *(_number(row[name]) for name in names)]) + "\n")
