"""Trace annotations: what producers learnt about a trace after its episode landed.

Each producer (prime-rl's `orchestrator` and `trainer`) appends update records to its
own chunked stream `annotations/<producer>/` and one row per update to
`annotations/<producer>.index.jsonl`: `{trace_id, chunk, offset, info}`. The rows are
read incrementally (`Annotations.read_on`) into per-trace scalars, so `info.effective`,
`info.ship.step` and `info.advantage` are known for every trace without reading a
stream; the per-token streams (advantages, trainer logprobs, entropies, is_masked,
mismatch_kl) are read only when an episode is opened (`updates_for`), and placed on its
nodes by `fold_updates`.

Order: within a producer, write order; across producers, producer-name order (prime-rl's
own reader folds producer by producer, sorted by name). Newest wins; `info` maps merge
deeply. The scalars follow the same rule, whichever producer's index was read first.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tracewatch.core.recordings.prime_rl.chunks import RecordUnreadable, read_record
from tracewatch.core.recordings.prime_rl.columns import MISSING, Growable, Ids, integers
from tracewatch.core.recordings.prime_rl.files import LineTail
from tracewatch.core.recordings.prime_rl.notes import Notes
from tracewatch.core.text import short_repr

INDEX_SUFFIX = ".index.jsonl"
MAX_ROW = 1 << 20
READ_BYTES = 256 << 10
"""As `episodes.READ_BYTES`."""
STREAM_FIELDS = ("advantages", "trainer_logprobs", "entropies", "is_masked", "mismatch_kl")
PARTIAL_STREAM_FIELDS = frozenset({"is_masked", "mismatch_kl"})
"""Streams a node takes with nulls among its values (one known value is enough)."""
SCALARS = ("effective", "ship_step", "advantage")


@dataclass(frozen=True)
class TraceScalars:
    """What the annotation index says of one trace, folded."""

    effective: bool | None
    """True: it was in a shipped cohort (a training batch, or an eval epoch's clean
    subset). None: not shipped (yet), which is not the same as False."""
    ship_step: int | None
    """The step its cohort shipped at (the eval step for an eval epoch)."""
    advantage: float | None
    info: dict[str, Any]
    """The three above as `info` keys, beside any other keys the updates set
    (deep-merged in the order the rows were read). `ship.time` and the streams come
    with the record (`PrimeRlRun.open_episode`)."""


class _Producer:
    def __init__(self, name: str, index: Path, code: int) -> None:
        self.name, self.code = name, code
        self.tail = LineTail(index, MAX_ROW)


class Annotations:
    """Every producer's annotation index under `folder`, followed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.traces = Ids()
        """One slot per annotated trace id."""
        self._effective = Growable(np.int8)
        self._ship_step = Growable(np.int32)
        self._advantage = Growable(np.float64)
        self._setter = {name: Growable(np.int8) for name in SCALARS}
        """Per slot and scalar, the producer whose update set it (`MISSING`: none)."""
        self._infos: dict[int, dict[str, Any]] = {}
        """Per slot, the merged info when it holds more than the three scalars."""
        self._update_slot = Growable(np.int32)
        self._update_producer = Growable(np.int8)
        self._update_chunk = Growable(np.int32)
        self._update_offset = Growable(np.int64)
        self.producers: list[_Producer] = []
        self._rank: np.ndarray[Any, Any] = np.zeros(0, dtype=np.int16)
        self._listed: tuple[int, int] | None = None
        self.skipped = Notes()

    def __len__(self) -> int:
        """Annotated traces."""
        return len(self.traces)

    @property
    def updates(self) -> int:
        return self._update_slot.size

    @property
    def caught_up(self) -> bool:
        return all(producer.tail.caught_up for producer in self.producers)

    def read_on(self, max_bytes: int = READ_BYTES) -> np.ndarray[Any, Any]:
        """Read the rows every producer wrote since the last call (about `max_bytes` in
        all); the slots whose scalars may have changed."""
        self._find_producers()
        touched: list[np.ndarray[Any, Any]] = []
        for producer in self.producers:
            got = producer.tail.read(max(max_bytes // max(len(self.producers), 1), 1))
            if got.restarted:
                self.skipped.add(f"{producer.tail.path.name} shrank or was replaced: its rows are read again")
            if got.problem:
                self.skipped.add(got.problem)
            rows = []
            for line in got.lines:
                try:
                    row = orjson.loads(line)
                except orjson.JSONDecodeError as error:
                    self.skipped.add(f"{producer.tail.path.name}: a line is not JSON ({error})")
                    continue
                if type(row) is dict and type(row.get("trace_id")) is str:
                    rows.append(row)
                else:
                    self.skipped.add(f"{producer.tail.path.name}: not an update row: {short_repr(row)}")
            if rows:
                touched.append(self._add(producer, rows))
        return np.unique(np.concatenate(touched)) if touched else np.zeros(0, dtype=np.int64)

    def _find_producers(self) -> None:
        try:
            info = os.stat(self.folder)
        except OSError:
            return
        listed = (info.st_mtime_ns, info.st_ino)
        if listed == self._listed:
            return
        self._listed = listed
        try:
            names = sorted(os.listdir(self.folder))
        except OSError:
            return
        known = {producer.name for producer in self.producers}
        for name in names:
            if name.endswith(INDEX_SUFFIX) and name[: -len(INDEX_SUFFIX)] not in known and len(self.producers) < 127:
                producer = name[: -len(INDEX_SUFFIX)]
                self.producers.append(_Producer(producer, self.folder / name, len(self.producers)))
        ranks = {name: rank for rank, name in enumerate(sorted(p.name for p in self.producers))}
        self._rank = np.array([ranks[p.name] for p in self.producers], dtype=np.int16)

    def _slots(self, trace_ids: list[str]) -> np.ndarray[Any, Any]:
        slots = np.array(self.traces.find_many(trace_ids), dtype=np.int64)
        new: dict[str, int] = {}
        for index in np.flatnonzero(slots < 0).tolist():
            trace_id = trace_ids[index]
            if trace_id not in new:
                new[trace_id] = len(self.traces) + len(new)
            slots[index] = new[trace_id]
        if new:
            count = len(new)
            self.traces.extend(list(new))
            self._effective.extend(np.full(count, MISSING, np.int8))
            self._ship_step.extend(np.full(count, MISSING, np.int32))
            self._advantage.extend(np.full(count, np.nan))
            for setter in self._setter.values():
                setter.extend(np.full(count, MISSING, np.int8))
        return slots

    def _add(self, producer: _Producer, rows: list[dict[str, Any]]) -> np.ndarray[Any, Any]:
        slots = self._slots([row["trace_id"] for row in rows])
        self._update_slot.extend(slots.astype(np.int32))
        self._update_producer.extend(np.full(len(rows), producer.code, np.int8))
        self._update_chunk.extend(integers([row.get("chunk", 0) for row in rows], np.int32))
        self._update_offset.extend(integers([row.get("offset") for row in rows]))
        for slot, row in zip(slots.tolist(), rows):
            info = row.get("info")
            if type(info) is dict and info:
                self._fold_info(slot, producer.code, info)
        return slots

    def _wins(self, slot: int, scalar: str, code: int) -> bool:
        """Whether an update of producer `code` read now overrides the scalar's value:
        same producer (written later) or a producer later in name order."""
        setter = int(self._setter[scalar].values[slot])
        if setter < 0 or self._rank[code] >= self._rank[setter]:
            self._setter[scalar].values[slot] = code
            return True
        return False

    def _fold_info(self, slot: int, code: int, info: dict[str, Any]) -> None:
        effective = info.get("effective")
        if "effective" in info and self._wins(slot, "effective", code):
            self._effective.values[slot] = 1 if effective is True else 0 if effective is False else MISSING
        ship = info.get("ship")
        step = ship.get("step") if type(ship) is dict else None
        if type(step) is int and -(1 << 31) < step < 1 << 31 and self._wins(slot, "ship_step", code):
            self._ship_step.values[slot] = step
        advantage: Any = info.get("advantage")
        if type(advantage) in (int, float) and self._wins(slot, "advantage", code):
            self._advantage.values[slot] = float(advantage)
        other = {key: value for key, value in info.items() if key not in ("effective", "ship", "advantage")}
        if type(ship) is dict and not {"step", "time"}.issuperset(ship):
            other["ship"] = {key: value for key, value in ship.items() if key not in ("step", "time")}
        if other:
            self._infos[slot] = deep_merge(self._infos.get(slot, {}), other)

    def column(self, name: str) -> np.ndarray[Any, Any]:
        """A per-slot scalar: `effective` (int8, `MISSING`), `ship_step` (int32,
        `MISSING`), `advantage` (float64, NaN)."""
        return {"effective": self._effective, "ship_step": self._ship_step, "advantage": self._advantage}[name].values

    def slots_of(self, trace_ids: list[str]) -> list[int]:
        return self.traces.find_many(trace_ids)

    def scalars(self, trace_id: str) -> TraceScalars | None:
        """What the index says of `trace_id`, None if no producer annotated it."""
        slot = self.traces.find(trace_id)
        if slot < 0:
            return None
        effective, step = int(self._effective.values[slot]), int(self._ship_step.values[slot])
        advantage = float(self._advantage.values[slot])
        info = dict(self._infos.get(slot, {}))
        if effective >= 0:
            info["effective"] = bool(effective)
        if step >= 0:
            ship = info.get("ship")
            info["ship"] = {**(ship if isinstance(ship, dict) else {}), "step": step}
        if advantage == advantage:
            info["advantage"] = advantage
        return TraceScalars(None if effective < 0 else bool(effective), None if step < 0 else step, None if advantage != advantage else advantage, info)

    def updates_for(self, trace_id: str) -> tuple[list[dict[str, Any]], list[str]]:
        """Every update record of `trace_id`, in fold order, and why any could not be read."""
        slot = self.traces.find(trace_id)
        if slot < 0:
            return [], []
        positions = np.flatnonzero(self._update_slot.values == slot).tolist()
        positions.sort(key=lambda p: (int(self._rank[int(self._update_producer.values[p])]), p))
        updates, problems = [], []
        for position in positions:
            producer = self.producers[int(self._update_producer.values[position])]
            chunk, offset = int(self._update_chunk.values[position]), int(self._update_offset.values[position])
            try:
                update = read_record(self.folder / producer.name, chunk, offset)
            except RecordUnreadable as error:
                problems.append(f"{producer.name}: {error}")
                continue
            if update.get("trace_id") != trace_id:
                problems.append(f"{producer.name}: the update at chunk {chunk}, offset {offset} is not of trace {trace_id}")
                continue
            updates.append(update)
        return updates, problems


def deep_merge(old: Any, new: Any) -> Any:
    """`new` over `old`: maps merge key by key, anything else replaces."""
    if type(old) is dict and type(new) is dict:
        return {**old, **{key: deep_merge(old.get(key), value) for key, value in new.items()}}
    return new


def branch_paths(nodes: list[Any]) -> list[list[int]]:
    """Root-to-leaf node indexes, one per branch, in leaf order (verifiers' branch
    order): a leaf is a node no node names as `parent`; a walk stops at a cycle or a
    parent out of range."""
    count = len(nodes)
    parents = {
        parent
        for node in nodes
        if type(node) is dict and type(parent := node.get("parent")) is int and 0 <= parent < count
    }
    paths = []
    for leaf in (index for index in range(count) if index not in parents):
        path: list[int] = []
        seen: set[int] = set()
        at: Any = leaf
        while type(at) is int and 0 <= at < count and at not in seen:
            seen.add(at)
            path.append(at)
            node = nodes[at]
            at = node.get("parent") if type(node) is dict else None
        paths.append(path[::-1])
    return paths


def fold_updates(trace: dict[str, Any], updates: Iterable[dict[str, Any]]) -> None:
    """Apply `updates` (in fold order) to `trace` as prime-rl folds them: `info`
    deep-merged; each branch stream cut into its nodes' spans along the branch's path,
    compacted to the node's sampled positions (its mask), and set on a node whose
    values are all known (or, for the partial streams, one is). A stream shorter than
    its branch leaves the nodes past its end untouched."""
    nodes = trace.get("nodes")
    if type(nodes) is not list:
        nodes = []
    paths = branch_paths(nodes)
    for update in updates:
        info = update.get("info")
        if type(info) is dict and info:
            trace["info"] = deep_merge(trace.get("info") if type(trace.get("info")) is dict else {}, info)
        branches = update.get("branches")
        for branch in branches if type(branches) is list else ():
            index = branch.get("index") if type(branch) is dict else None
            if type(index) is not int or not 0 <= index < len(paths):
                continue
            for field in STREAM_FIELDS:
                stream = branch.get(field)
                if type(stream) is list and stream:
                    _place(nodes, paths[index], field, stream)


def _place(nodes: list[Any], path: list[int], field: str, stream: list[Any]) -> None:
    cursor = 0
    for at in path:
        node = nodes[at]
        if type(node) is not dict:
            return
        tokens, mask = node.get("token_ids"), node.get("mask")
        count = len(tokens) if type(tokens) is list else 0
        span = stream[cursor : cursor + count]
        cursor += count
        if len(span) < count:
            return
        values = [value for value, sampled in zip(span, mask if type(mask) is list else ()) if sampled]
        if not values:
            continue
        if any(value is None for value in values) and (
            field not in PARTIAL_STREAM_FIELDS or all(value is None for value in values)
        ):
            continue
        node[field] = values
