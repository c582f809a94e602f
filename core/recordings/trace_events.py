"""A run in Chrome's Trace Event format, for Perfetto and chrome://tracing: one process
per variant, one track (thread) per rollout, a slice for the whole rollout with its
task, reward and ending as args, and nested in it a slice for waiting for a slot, for
each attempt that was discarded and retried, for each timing span of the attempt that
stood, and for each model call inside the agent span (one that has not returned an
open slice to the last known time).

A track's slices must nest: a child inside its parent, siblings apart. The spans come
from the server's clock and the queue times from ours, and a hostile or damaged trace
may say anything, so each slice is clamped into its parent and after its elder sibling
rather than written as reported.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from tracewatch.core.paths import private_output
from tracewatch.core.recordings.apply_records import RecordedVariant, apply_record
from tracewatch.core.recordings.index import RecordingIndex
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.wire.episode_json import json_line

MICROSECONDS = 1e6


@dataclass
class TraceEventsWritten:
    """What `write_trace_events` wrote."""

    rollouts: int = 0
    slices: int = 0
    skipped: list[str] = field(default_factory=list)
    """Rollouts with no time to draw (never queued with a usable time)."""
    truncated: str | None = None


def recording_rollouts(path: str | os.PathLike[str], written: TraceEventsWritten) -> Iterator[Rollout]:
    """Each rollout of a recording rebuilt from its records alone, one at a time, so
    memory holds one rollout, not the recording."""
    index = RecordingIndex.build(path)
    written.truncated = index.truncated
    for rollout_id in index.rollouts:
        scratch = RolloutStore()
        variants: dict[str, RecordedVariant] = {}
        for record in index.load(rollout_id):
            apply_record(scratch, variants, record)
        if (rollout := scratch.rollouts.get(rollout_id)) is not None:
            yield rollout


def write_trace_events(
    rollouts: Iterable[Rollout], path_out: str | os.PathLike[str], written: TraceEventsWritten | None = None, origin: float | None = None
) -> TraceEventsWritten:
    """The rollouts as one Trace Event JSON object, written as they come. Times count
    from `origin` (`first_time` of rollouts held whole), else from the first
    rollout's start; a time before it is drawn at it, so no `ts` is negative."""
    written = written or TraceEventsWritten()
    with private_output(path_out) as out:
        writer = _Writer(out, origin)
        for rollout in rollouts:
            slices = writer.rollout(rollout)
            if slices is None:
                written.skipped.append(rollout.key)
            else:
                written.rollouts += 1
                written.slices += slices
        writer.close()
    return written


def first_time(rollouts: Iterable[Rollout]) -> float | None:
    """The earliest usable time of any of `rollouts`: a run folder's episodes come in
    the order they finished, so its first rollout need not be the first to start."""
    return min((extent[0] for rollout in rollouts if (extent := _extent(rollout)) is not None), default=None)


def _extent(rollout: Rollout) -> tuple[float, float] | None:
    """The first and last usable times a rollout knows of, None if it knows none."""
    times = rollout.times
    known = [t for t in (rollout.created_at, rollout.started_at, rollout.ended_at, rollout.last_delta_at) if t is not None and _usable(t)]
    if times is not None:
        known += [t for span in times.spans for t in (span.start, span.end) if t is not None and _usable(t)]
        known += [t for attempt in times.attempts for t in attempt if _usable(t)]
    return (min(known), max(known)) if known else None


class _Writer:
    def __init__(self, out: TextIO, origin: float | None) -> None:
        self.out = out
        self.origin = origin
        """Times are written in microseconds from here: the run's first time."""
        self.pids: dict[str, int] = {}
        self.tids: dict[str, int] = {}
        self.first = True
        out.write('{"displayTimeUnit":"ms","traceEvents":[\n')

    def close(self) -> None:
        other = {"origin_unix_seconds": self.origin, "source": "tracewatch"}
        self.out.write(f'\n],"otherData":{json.dumps(other)}}}\n')

    def rollout(self, rollout: Rollout) -> int | None:
        """Its slices, outermost first; None if it has no usable time."""
        extent = _extent(rollout)
        if extent is None:
            return None
        if self.origin is None:
            self.origin = extent[0]
        start, end = (max(t, self.origin) for t in extent)
        times = rollout.times
        pid, tid = self._track(rollout)
        ending = rollout.ending
        args: dict[str, Any] = {
            "rollout": rollout.key,
            "task": rollout.task_label,
            "task_index": rollout.task_index,
            "reward": rollout.reward,
            "ending": ending.status.value if ending else rollout.status.value,
            "reason": ending.reason if ending else None,
            "turns": rollout.turns,
            "tokens": rollout.tokens,
        }
        self._slice("rollout", "rollout", start, end, pid, tid, args)
        count = 1
        cursor = start
        spans = times.spans if times is not None else ()
        attempts = times.attempts if times is not None else ()
        first_span = attempts[0][0] if attempts else spans[0].start if spans else rollout.started_at
        if first_span is not None and _usable(first_span) and first_span > start:
            cursor = self._slice("waiting for a slot", "waiting", start, min(first_span, end), pid, tid)
            count += 1
        for number, (attempt_start, attempt_end) in enumerate(attempts, 1):
            attempt_start, attempt_end = max(attempt_start, cursor), min(attempt_end, end)
            if attempt_end >= attempt_start:
                cursor = self._slice(f"attempt {number} (discarded, retried)", "attempt", attempt_start, attempt_end, pid, tid)
                count += 1
        for span in spans:
            span_start = max(span.start, cursor)
            span_end = min(span.end if span.end is not None else end, end)
            if span_end < span_start:
                continue
            open_ = {"open": True} if span.end is None else None
            cursor = self._slice(span.phase, "phase", span_start, span_end, pid, tid, open_)
            count += 1
            if span.phase == "agent" and times is not None:
                call_cursor = span_start
                number = 0
                for number, (call_start, call_end) in enumerate(times.call_intervals(), 1):
                    call_start, call_end = max(call_start, call_cursor), min(call_end, span_end)
                    if call_end >= call_start:
                        call_cursor = self._slice(f"model call {number}", "model", call_start, call_end, pid, tid)
                        count += 1
                if times.open_call and span_end >= (call_start := max(times.open_call, call_cursor)):
                    self._slice(f"model call {number + 1} (open)", "model", call_start, span_end, pid, tid, {"open": True})
                    count += 1
        if ending is not None and ending.status.value != "done":
            self._event({"name": ending.status.value, "cat": "ending", "ph": "i", "s": "t", "ts": self._ts(end), "pid": pid, "tid": tid, "args": {"reason": ending.reason}})
        return count

    def _track(self, rollout: Rollout) -> tuple[int, int]:
        pid = self.pids.get(rollout.variant)
        if pid is None:
            pid = self.pids[rollout.variant] = len(self.pids) + 1
            self._event({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": rollout.variant}})
            self._event({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        tid = self.tids[rollout.key] = len(self.tids) + 1
        self._event({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": f"{rollout.key} {rollout.task_label}"}})
        self._event({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        return pid, tid

    def _slice(self, name: str, category: str, start: float, end: float, pid: int, tid: int, args: dict[str, Any] | None = None) -> float:
        """A complete slice; returns its end, where its next sibling may start."""
        ts = self._ts(start)
        event: dict[str, Any] = {"name": name, "cat": category, "ph": "X", "ts": ts, "dur": max(0.0, self._ts(end) - ts), "pid": pid, "tid": tid}
        if args:
            event["args"] = args
        self._event(event)
        return end

    def _ts(self, t: float) -> float:
        assert self.origin is not None
        return round((t - self.origin) * MICROSECONDS, 3)

    def _event(self, event: dict[str, Any]) -> None:
        if not self.first:
            self.out.write(",\n")
        self.first = False
        self.out.write(json_line(event))


def _usable(t: float) -> bool:
    return math.isfinite(t) and 0 < t < 1e12
