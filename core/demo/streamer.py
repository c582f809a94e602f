"""Cut deltas from live traces the way verifiers 0.4.0's `DeltaStreamer` does.

Each `notify` schedules one flush with `call_soon`, so changes made in the same loop
iteration ride one delta. A flush diffs every live trace against its cursor (what was
sent): the header once, list items past the sent counts, scalars whose packed bytes
changed, and `pending` when it changed (left out when nodes land and it is empty: the
client clears it itself). A trace that left the live set gets `discard`. A cursor only
advances once its delta is on the wire, so a failed send is diffed again next time.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from tracewatch.core.demo.trace import LiveTrace
from tracewatch.core.wire.protocol import LIST_FIELDS, pack

logger = logging.getLogger(__name__)

_EMPTY = pack([])


class Cursor:
    """What of one trace has been sent."""

    def __init__(self) -> None:
        self.sent = dict.fromkeys(LIST_FIELDS, 0)
        self.scalars: dict[str, bytes] = {}
        self.pending = _EMPTY


class DeltaStreamer:
    def __init__(
        self, traces: Callable[[], list[LiveTrace]], send: Callable[[bytes], Awaitable[None]]
    ) -> None:
        self.traces = traces
        self.send = send
        self.cursors: dict[str, Cursor] = {}
        self._scheduled: asyncio.Handle | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> DeltaStreamer:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        if exc_type is None:
            # the reply must follow every delta, so send what the run left behind first
            await self.drain()
            await self.flush()
        else:
            # an aborted run's client has gone: nothing more is sent
            for task in self._flushes:
                task.cancel()

    def watch(self, trace: LiveTrace) -> None:
        trace.watch(self._changed)
        self._changed(trace)

    async def drain(self) -> None:
        """Wait until every change notified so far is on the wire: the only pacing a
        rollout that runs as fast as the socket takes it gets."""
        while self._scheduled is not None or self._flushes:
            if self._flushes:
                await asyncio.gather(*self._flushes, return_exceptions=True)
            else:
                await asyncio.sleep(0)

    def _changed(self, trace: LiveTrace) -> None:
        if self._scheduled is None:
            self._scheduled = asyncio.get_running_loop().call_soon(self._start_flush)

    def _start_flush(self) -> None:
        self._scheduled = None
        task = asyncio.get_running_loop().create_task(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def flush(self) -> None:
        # serialized: deltas leave in diff order, and the reply after the last of them
        async with self._lock:
            for trace_id, data, cursor in self.diff():
                try:
                    await self.send(data)
                except Exception:  # noqa: BLE001 - the cursor stays put; next flush retries
                    logger.warning("failed to send a delta for trace %s", trace_id, exc_info=True)
                    continue
                if cursor is None:
                    self.cursors.pop(trace_id, None)
                else:
                    self.cursors[trace_id] = cursor

    def diff(self) -> list[tuple[str, bytes, Cursor | None]]:
        """Each trace's packed delta with the cursor as it stands once that delta is
        sent (None for a discard). Packed here, so what the cursor records is exactly
        what goes out even if the rollout changes the trace while a send waits."""
        traces = list(self.traces())
        live = {trace.id for trace in traces}
        out: list[tuple[str, bytes, Cursor | None]] = [
            (trace_id, pack({"trace": trace_id, "discard": True}), None)
            for trace_id in self.cursors
            if trace_id not in live
        ]
        for trace in traces:
            delta: dict[str, Any] = {"trace": trace.id}
            sent = self.cursors.get(trace.id)
            cursor = copy.deepcopy(sent) if sent is not None else Cursor()
            if sent is None:
                delta["open"] = trace.header
            for field, items in trace.lists.items():
                if len(items) > cursor.sent[field]:
                    delta[field] = items[cursor.sent[field] :]
                    cursor.sent[field] = len(items)
            changed = {}
            for field, value in trace.scalars.items():
                packed = pack(value)
                if cursor.scalars.get(field) != packed:
                    cursor.scalars[field] = packed
                    changed[field] = value
            if changed:
                delta["set"] = changed
            packed = pack(trace.pending)
            if packed != cursor.pending:
                cursor.pending = packed
                if trace.pending or "nodes" not in delta:
                    delta["pending"] = trace.pending
            if len(delta) > 1:
                out.append((trace.id, pack(delta), cursor))
        return out
