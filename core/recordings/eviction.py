"""Finished rollouts leave memory while the session is recorded, and come back from the
recording when a view needs their traces.

Holding every rollout's traces to the end costs about their wire size each, for the
whole session. Once a finished rollout's records are all on disk (the recorder keeps where each
one went, `RolloutSpans`), its traces may go: the store keeps its summary (`unload`),
which is all the table, the cards, compare, the stats and the headless summary read.
Selecting it, showing it side by side or exporting it reads its records back
(`read_records`, the opened recording's reader) and rebuilds it as a replay does
(`apply_record`), so it shows exactly what it showed before. The newest finished
rollouts (or those last looked at) stay, up to `HELD_BYTES`, so browsing what just
ended reads nothing back.
Without a recording, or once it failed, nothing leaves: it could not come back.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Collection
from typing import cast

from tracewatch.core.errors import TracewatchError
from tracewatch.core.recordings.apply_records import RecordedVariant, apply_record
from tracewatch.core.recordings.file_format import Damage
from tracewatch.core.recordings.index import read_records
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.wire.packed_list import PackedList

HELD_BYTES = 32 << 20
"""The packed traces of finished rollouts kept in memory, newest first, besides those in
view: a few dozen 200-turn rollouts, well under the wire bytes of a training run."""


GIVE_BACK_AFTER = 16 << 20
"""Packed bytes that left memory before the freed blocks are given back to the system."""


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, if the C library is glibc: looked up among the symbols
    the process has loaded (`find_library` would run `ldconfig` at every start)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def give_back_freed_memory() -> None:
    """Return the pages of freed blocks to the system. A rollout's traces are many
    blocks of a few kB between blocks that stay (other rollouts' summaries and
    spans), and glibc gives back only the top of its heap on its own, so without this the
    RSS stays where it was (docs/performance.md). It releases the GIL
    (ctypes), so a worker thread runs it while the loop goes on."""
    if _TRIM is not None:
        _TRIM(0)


class TracesUnavailable(TracewatchError, ValueError):
    """A rollout's traces left memory and cannot be read back; the message says why."""


class Eviction:
    """Which finished rollouts hold their traces in memory, and which left (`evicted`)."""

    def __init__(self, store: RolloutStore, recorder: Recorder, budget: int = HELD_BYTES) -> None:
        self.store = store
        self.recorder = recorder
        self.budget = budget
        self.held: dict[str, int] = {}
        """Finished rollouts whose traces are in memory, oldest first: their packed bytes."""
        self.held_bytes = 0
        self.evicted: set[str] = set()
        self._replies_seen = 0

    def run(self, in_view: Collection[str]) -> int:
        """One pass: the oldest finished rollouts not in view leave while those held
        pass the budget; the packed bytes that left."""
        if self.recorder.error is not None:
            return 0
        replied = self.recorder.replied
        for key in replied[self._replies_seen :]:
            if key not in self.held and key not in self.evicted and key in self.store.rollouts:
                self._hold(key)
        self._replies_seen = len(replied)
        left = 0
        if self.held_bytes <= self.budget:
            return left
        for key in list(self.held):
            if self.held_bytes <= self.budget:
                break
            if key in in_view or not self.store.rollouts[key].status.finished or self.recorder.spans_on_disk(key) is None:
                continue
            size = self.held.pop(key)
            self.held_bytes -= size
            self.store.unload(key)
            self.evicted.add(key)
            left += size
        return left

    def load(self, key: str) -> None:
        """An evicted rollout's traces back in the store; if they cannot be read, its
        `unavailable` says why (and the next look tries again). One held is now the
        newest: the last to leave."""
        if key in self.held:
            self.held[key] = self.held.pop(key)
        if key not in self.evicted:
            return
        rollout = self.store.rollouts[key]
        try:
            loaded = self.read(key)
        except TracesUnavailable as error:
            rollout.unavailable = str(error)
            self.store.touch_rollout(key)
            return
        self.store.reload(key, loaded)
        self.evicted.discard(key)
        self._hold(key)

    def read(self, key: str) -> Rollout:
        """That evicted rollout rebuilt from its records, apart from the store (an
        export reads it from a worker thread). TracesUnavailable if the file is gone or
        no longer holds what was recorded."""
        path = self.recorder.path
        spans = self.recorder.spans_on_disk(key)
        assert spans is not None  # it left only once they were all on disk
        damage = Damage()
        try:
            records = read_records(path, spans.offsets, spans.lengths, damage)
        except OSError as error:
            raise TracesUnavailable(f"{key} left memory and cannot be read back: {path}: {error.strerror or error}") from None
        scratch = RolloutStore()
        variants: dict[str, RecordedVariant] = {}
        for number, record in enumerate(records, 1):
            if not damage.check(record, f"its record {number}", announced=scratch.rollouts):
                apply_record(scratch, variants, record)
        loaded = scratch.rollouts.get(key)
        rollout = self.store.rollouts[key]
        if damage.skipped or loaded is None or (loaded.deltas, loaded.status) != (rollout.deltas, rollout.status):
            found = damage.first or (
                f"{loaded.deltas} of its {rollout.deltas} deltas read, ending {loaded.status.value}"
                if loaded is not None
                else "its announcement is missing"
            )
            raise TracesUnavailable(f"{key} left memory and {path} no longer holds it as recorded: {found}")
        return loaded

    def _hold(self, key: str) -> None:
        size = sum(
            cast(PackedList, trace.record["nodes"]).nbytes + cast(PackedList, trace.record["calls"]).nbytes
            for trace in self.store.rollouts[key].traces.values()
        )
        self.held[key] = size
        self.held_bytes += size
