"""`metrics.jsonl` followed: every producer's metric rows, as series a chart reads by key.

prime-rl appends `{"step": N | null, "time": epoch seconds, <key>: number, ...,
"producer": name}` rows (written with `json.dumps`), from every process of the run into
the one file. A row with a null step is keyed by time (inference engine gauges sampled
on wall time). One step can have several rows, from one producer or several. A
relaunch appends; a file that shrank or was replaced is read again from its start
(`generation` tells).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tracewatch.core.recordings.prime_rl.files import LineTail
from tracewatch.core.recordings.prime_rl.notes import Notes

MAX_ROW = 4 << 20
READ_BYTES = 4 << 20
ROW_KEYS = ("step", "time", "producer")
MAX_PRODUCERS = 1000
"""Distinct producer names kept; past them a row's producer reads as None."""

_TRAINER_PREFIXES = (
    "perf", "optim", "loss", "entropy", "system", "mismatch_kl", "kl_ent_ratio", "is_masked", "masked_",
    "unmasked_", "max_vio", "routing_", "ref_kl", "val",
)
_ORCHESTRATOR_PREFIXES = ("train", "batch", "off_policy", "curriculum", "eval/", "progress/")


def legacy_producer(key: str, step: int | None) -> str:
    """The producer prime-rl's dashboard assigns a row without `producer`, from its key:
    `infer` for time-keyed rows, else by the key's prefix."""
    if step is None:
        return "infer"
    if key.startswith(_TRAINER_PREFIXES):
        return "trainer"
    return "orchestrator" if key.startswith(_ORCHESTRATOR_PREFIXES) else "trainer"


@dataclass(frozen=True)
class Series:
    """One metric's values in the order they were written, with each row's step (NaN
    for a time-keyed row), time (NaN if none) and producer (a code into `producers`)."""

    step: np.ndarray[Any, np.dtype[np.float64]]
    time: np.ndarray[Any, np.dtype[np.float64]]
    value: np.ndarray[Any, np.dtype[np.float64]]
    producer: np.ndarray[Any, np.dtype[np.int16]]

    def by_step(self) -> Series:
        """The rows keyed by step."""
        return self._where(~np.isnan(self.step))

    def by_time(self) -> Series:
        """The rows keyed by time (a null step)."""
        return self._where(np.isnan(self.step))

    def _where(self, keep: np.ndarray[Any, Any]) -> Series:
        return Series(self.step[keep], self.time[keep], self.value[keep], self.producer[keep])


class _Column:
    __slots__ = ("step", "time", "value", "producer")

    def __init__(self) -> None:
        self.step, self.time, self.value, self.producer = array("d"), array("d"), array("d"), array("h")


class MetricsReader:
    """`read_on` adds the rows written since the last call; `series(key)` reads one."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._tail = LineTail(path, MAX_ROW) if path is not None else None
        self._columns: dict[str, _Column] = {}
        self.producers: list[str | None] = []
        self._producer_codes: dict[str | None, int] = {}
        self.rows = 0
        self.generation = 0
        """Bumped when the file shrank or was replaced: every series starts over."""
        self.skipped = Notes()

    @property
    def caught_up(self) -> bool:
        return self._tail is None or self._tail.caught_up

    @property
    def keys(self) -> list[str]:
        return list(self._columns)

    def count(self, key: str) -> int:
        """Rows of `key` read since the file (re)started."""
        column = self._columns.get(key)
        return 0 if column is None else len(column.value)

    def series(self, key: str) -> Series | None:
        column = self._columns.get(key)
        if column is None:
            return None
        return Series(
            np.frombuffer(column.step, dtype=np.float64).copy(),
            np.frombuffer(column.time, dtype=np.float64).copy(),
            np.frombuffer(column.value, dtype=np.float64).copy(),
            np.frombuffer(column.producer, dtype=np.int16).copy(),
        )

    def read_on(self, max_bytes: int = READ_BYTES) -> int:
        """Rows added."""
        if self._tail is None:
            return 0
        got = self._tail.read(max_bytes)
        if got.restarted:
            self._columns.clear()
            self.rows, self.generation = 0, self.generation + 1
        if got.problem:
            self.skipped.add(got.problem)
        added = 0
        for line in got.lines:
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                try:
                    row = _json_with_constants(line)
                except ValueError as error:
                    self.skipped.add(f"{self._tail.path.name}: a line is not JSON ({error})")
                    continue
            if type(row) is not dict:
                self.skipped.add(f"{self._tail.path.name}: a line is not a metrics row")
                continue
            self._add(row)
            added += 1
        self.rows += added
        return added

    def _add(self, row: dict[str, Any]) -> None:
        step, time, producer = row.get("step"), row.get("time"), row.get("producer")  # type: Any, Any, Any
        step_value = float(step) if type(step) is int and abs(step) < 1 << 53 else math.nan
        time_value = float(time) if type(time) in (int, float) else math.nan
        name = producer if type(producer) is str and len(self.producers) < MAX_PRODUCERS else None
        code = self._producer_codes.get(name)
        if code is None:
            code = self._producer_codes[name] = len(self.producers)
            self.producers.append(name)
        for key, value in row.items():
            if key in ROW_KEYS or type(value) not in (int, float):
                continue
            column = self._columns.get(key)
            if column is None:
                column = self._columns[key] = _Column()
            column.step.append(step_value)
            column.time.append(time_value)
            column.value.append(value if type(value) is float else _int_value(value))
            column.producer.append(code)


def _int_value(value: int) -> float:
    """An integer as a float, an enormous one as an infinity."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _json_with_constants(line: bytes) -> Any:
    """A row `json.dumps` wrote with a non-finite value (NaN, Infinity), which orjson
    refuses: prime-rl drops those, an older writer may not have."""
    import json

    try:
        return json.loads(line)
    except (ValueError, RecursionError) as error:
        raise ValueError(str(error)) from None
