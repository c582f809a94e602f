"""A recording's records applied to a store exactly as the live engine put them there:
what a replay, an opened recording and a rollout read back after it left memory
(`tracewatch.core.recordings.eviction`) all share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracewatch.core.recordings.ending import VIEW_INCOMPLETE, recorded_ending
from tracewatch.core.session.contracts import Escalation, VariantState
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.wire.assembly import AssemblyError
from tracewatch.core.wire.protocol import delta_failure


class RecordedVariant:
    """A variant as its recorded lifecycle events describe it; read-only."""

    can_start = False
    can_cancel = False
    supervised = False
    health_left = None
    cancel_unavailable = None
    rollout_cancel_unavailable = None
    cancel_words = None
    status_line = None
    source_lost = None

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = VariantState.IDLE
        self.reason: str | None = None
        self.pid: int | None = None
        self.address: str | None = None
        self.server_started_at: float | None = None
        self.escalation: list[Escalation] = []
        self.outcome_text: str | None = None
        self.model: str | None = None
        self.sampling: dict[str, Any] = {}

    def grace_left(self, now: float | None = None) -> None:
        return None

    def log_tail(self, n: int = 200) -> list[str]:
        return ["(server logs are not part of a recording)"]

    def log_size(self) -> int:
        return 0

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        pass

    def apply_event(self, event: dict[str, Any]) -> None:
        kind = str(event.get("kind"))
        t = float(event.get("t") or 0.0)
        if kind in VariantState.__members__.values():
            self.state = VariantState(kind)
            self.reason = event.get("reason") or (self.reason if kind == "failed" else None)
        elif kind in ("started", "attached"):
            self.pid = event.get("pid")
            self.address = event.get("address")
            self.server_started_at = t
            self.model = event.get("model") if isinstance(event.get("model"), str) else self.model
            self.sampling = event["sampling"] if isinstance(event.get("sampling"), dict) else self.sampling
        elif "detail" in event:
            self.escalation.append(Escalation(t, kind, str(event["detail"])))
        elif kind == "exited":
            self.pid = None
            self.outcome_text = str(event.get("outcome") or f"exit code {event.get('code')} · {event.get('status', 'exited')}")


def run_of(announce: dict[str, Any]) -> int:
    """Which start of its variant a recorded rollout belongs to (1 in older files)."""
    run = announce.get("run")
    return run if isinstance(run, int) and run > 0 else 1


def recorded_task_key(announce: dict[str, Any]) -> str | None:
    """The task's key a rollout's announcement keeps (none in older files)."""
    key = announce.get("task_key")
    return key if isinstance(key, str) and key else None


def apply_record(store: RolloutStore, variants: dict[str, RecordedVariant], record: dict[str, Any]) -> None:
    """One recorded record into the store, exactly as the live engine put it there."""
    kind = record.get("k")
    t = record.get("t")
    if kind == "rollout":
        store.add_rollout(
            record["variant"], record.get("task_index", 0), record.get("task_data") or {},
            record.get("rollout_index", 0), key=record["id"], run=run_of(record),
            t=float(t) if isinstance(t, (int, float)) else None, task_key=recorded_task_key(record),
        )
        variants.setdefault(record["variant"], RecordedVariant(record["variant"]))
    elif kind == "request":
        store.started(record["id"], record["request_id"], t)
        running = record.get("running_t")
        if isinstance(running, (int, float)) and not isinstance(running, bool):
            store.running_from(record["id"], float(running))
    elif kind == "cancelling":
        store.cancelling(record["id"])
    elif kind == "delta":
        key = record["id"]
        try:
            store.apply_delta(key, record["d"], t)
        except Exception as error:  # noqa: BLE001 - the run failed on it live, the same way
            rollout = store.rollouts[key]
            reason = delta_failure(rollout.request_id or "?", error)
            store.failed(key, reason, cancelled=rollout.status is Status.CANCELLING, t=t)
    elif kind == "reply":
        reply = record.get("r") or {}
        key = record["id"]
        episode = None
        if reply.get("success") and reply.get("head") is not None:
            end = record.get("end")
            partial = isinstance(end, Mapping) and str(end.get("reason")).startswith(VIEW_INCOMPLETE)
            try:
                episode = store.rollouts[key].assembly.finish(reply["head"], reply.get("traces") or [], partial=partial)
            except Exception as error:  # noqa: BLE001 - the recorded deltas do not add up to the reply
                reason = str(error) if isinstance(error, AssemblyError) else f"the recorded reply is damaged ({error!r})"
                store.failed(key, reason, t=t)
                return
        store.ended(key, recorded_ending(record, episode), episode, t)
    elif kind == "event":
        variant = variants.setdefault(record["variant"], RecordedVariant(record["variant"]))
        variant.apply_event(record)
        store.touch_variant(variant.name)


class ReplayClock:
    """Recorded time as the replay sees it: the store's `now` is the time of the
    last record applied, so elapsed and idle read as they did live."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now
