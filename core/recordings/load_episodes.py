"""A finished episode (as a verifiers run directory or `export --episodes` keeps it)
into a store as if it had streamed, so an opened run reads as a live one did."""

from __future__ import annotations

from typing import Any, cast

from tracewatch.core.recordings.apply_records import run_of
from tracewatch.core.recordings.episode_checks import episode_problem
from tracewatch.core.recordings.export import ORIGIN_KEY
from tracewatch.core.run.times import epoch_time
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.task_identity import episode_task_key, task_identity
from tracewatch.core.wire.assembly import AssemblyError
from tracewatch.core.wire.protocol import LIST_FIELDS, WireDelta


class TaskNumbers:
    """Numbers a run's episodes by task, as a live view numbers its rollouts: tasks in
    the order first met, each task's rollouts from 0 (`task_identity`)."""

    def __init__(self) -> None:
        self._tasks: dict[str, int] = {}
        self._rollouts: dict[int, int] = {}

    def of(self, task_key: str | None, data: Any) -> tuple[int, int]:
        """The task's index and this rollout's index within it."""
        return self.reserve(task_identity(task_key, data), 1)

    def reserve(self, identity: str, count: int) -> tuple[int, int]:
        """`count` rollouts of the task `identity` (`task_identity`) at once: the
        task's index and the first one's index within it."""
        task_index = self._tasks.setdefault(identity, len(self._tasks))
        rollout_index = self._rollouts.get(task_index, 0)
        self._rollouts[task_index] = rollout_index + count
        return task_index, rollout_index


def load_episode(
    store: RolloutStore, variant: str, numbers: TaskNumbers, episode: dict[str, Any], step: int | None = None
) -> None:
    """A whole episode into the store as if it had streamed: each trace as one delta
    (its header, every list item, every scalar), then the reply; an exported partial
    one ends as it ended (cancelled, failed, or still running). It is numbered as
    `tracewatch export --episodes` recorded it, else by its task among `numbers`;
    `step` is the training step that logged it, where one did. An episode that no
    reader could use (`episode_problem`, or a trace the wire's boundary check refuses)
    is a failed row that says why. The store keeps the episode as the assembly packed
    it, never the file's copy: a big run is held once, compactly."""
    problem = episode_problem(episode)
    task = _map(episode.get("task"))
    data = _map(task.get("data") or task) if problem is None else {}  # a bad head's may nest past any bound
    task_key = episode_task_key(task)
    origin = episode.get(ORIGIN_KEY)
    origin = origin if isinstance(origin, dict) and problem is None else {}
    task_index, rollout_index = numbers.of(task_key, data)
    traces: list[dict[str, Any]] = (episode.get("traces") or []) if problem is None else []
    timing = [_map(t.get("timing")) for t in traces]
    start = min((epoch_time(t.get("start")) for t in timing), default=0.0) or None
    end = max((epoch_time(span.get("end")) for t in timing for span in t.values() if type(span) is dict), default=0.0)
    rollout = store.add_rollout(  # queued when it began, else at no known time: never at the moment it was opened
        variant, origin.get("task_index", task_index), data, origin.get("rollout_index", rollout_index),
        key=origin.get("rollout") if isinstance(origin.get("rollout"), str) else None, run=run_of(origin),
        t=start or end, task_key=task_key, step=step,
    )
    episode_id = episode.get("id")
    store.started(rollout.key, episode_id if isinstance(episode_id, str) and episode_id else rollout.key, start)
    if problem is not None:
        store.failed(rollout.key, f"this episode cannot be shown: {problem}", t=start)
        return
    for trace in traces:
        try:
            store.apply_delta(rollout.key, trace_as_delta(trace), start or end)
        except AssemblyError as error:  # a value no reader could use: shown, not loaded
            store.failed(rollout.key, f"this episode cannot be shown: {error}", t=end or start)
            return
    if not episode.get("partial"):
        head = {key: value for key, value in episode.items() if key != "traces"}
        summaries = [{"id": trace["id"], "nodes": len(trace.get("nodes") or ()), "calls": len(trace.get("calls") or ())} for trace in traces]
        store.finished(rollout.key, rollout.assembly.finish(head, summaries, partial=True), end or start)
    elif origin.get("ended") != "running":
        store.failed(rollout.key, str(episode.get("error")), cancelled=origin.get("ended") == "cancelled", t=end or start)


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


HEADER_KEYS = ("version", "id", "verifiers", "task")


def trace_as_delta(trace: dict[str, Any]) -> WireDelta:
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
    return cast(WireDelta, delta)
