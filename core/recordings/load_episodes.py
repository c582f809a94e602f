"""A finished episode (as a verifiers run directory or `export --episodes` keeps it)
into a store as if it had streamed, so an opened run reads as a live one did."""

from __future__ import annotations

from typing import Any

from core.recordings.apply_records import run_of
from core.recordings.export import ORIGIN_KEY
from core.session.store import RolloutStore
from core.wire.assembly import AssemblyError
from core.wire.protocol import LIST_FIELDS


def load_episode(store: RolloutStore, variant: str, index: int, episode: dict[str, Any]) -> None:
    """A whole episode into the store as if it had streamed: each trace as one delta
    (its header, every list item, every scalar), then the reply; an exported partial
    one ends as it ended (cancelled, failed, or still running)."""
    task = episode.get("task") or {}
    origin = episode.get(ORIGIN_KEY)
    origin = origin if isinstance(origin, dict) else {}
    rollout = store.add_rollout(
        variant, origin.get("task_index", index), task.get("data") or task, origin.get("rollout_index", 0),
        key=origin.get("rollout") if isinstance(origin.get("rollout"), str) else None, run=run_of(origin),
    )
    timing = [t.get("timing") or {} for t in episode.get("traces") or []]
    start = min((t.get("start") or 0.0 for t in timing), default=0.0) or None
    end = max((span.get("end") or 0.0 for t in timing for span in t.values() if isinstance(span, dict)), default=0.0)
    store.started(rollout.key, str(episode.get("id") or rollout.key), start)
    for trace in episode.get("traces") or []:
        try:
            store.apply_delta(rollout.key, trace_as_delta(trace), end or start)
        except AssemblyError as error:  # a value no reader could use: shown, not loaded
            store.failed(rollout.key, f"this episode cannot be shown: {error}", t=end or start)
            return
    if not episode.get("partial"):
        store.finished(rollout.key, episode, end or start)
    elif origin.get("ended") != "running":
        store.failed(rollout.key, str(episode.get("error")), cancelled=origin.get("ended") == "cancelled", t=end or start)


HEADER_KEYS = ("version", "id", "verifiers", "task")


def trace_as_delta(trace: dict[str, Any]) -> dict[str, Any]:
    delta: dict[str, Any] = {
        "trace": trace["id"],
        "open": {key: trace[key] for key in HEADER_KEYS if key in trace},
    }
    for key in LIST_FIELDS:
        if trace.get(key):
            delta[key] = trace[key]
    if "pending" in trace:  # a partial episode's preview, as it was when it ended
        delta["pending"] = trace["pending"]
    scalars = {k: v for k, v in trace.items() if k not in HEADER_KEYS and k not in LIST_FIELDS and k != "pending"}
    if scalars:
        delta["set"] = scalars
    return delta
