"""A followed prime-rl run's finished episodes as the table's rows (`FinishedRows`):
the run's own columns (`EpisodeTable`), plus what a row shows that the index does not
say (its variant, its number among its task's rollouts, whether a rollout stands for
it), a few bytes a row. A million finished episodes stay a million rows of arrays; a
`Rollout` is made only for a row seen live or opened (`FollowedRun`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from tracewatch.core.engine.coded_task_numbers import CodedTaskNumbers
from tracewatch.core.recordings.prime_rl.columns import HEX_DIGITS, Growable, Positions
from tracewatch.core.recordings.prime_rl.episodes import STEP_UNKNOWN, EpisodeTable
from tracewatch.core.session.finished_columns import hex_trace_numbers, labelled_tasks, trace_number

DERIVED = ("tokens", "elapsed", "step")
"""`FinishedRows` columns made from the run's own (kept, made again for the rows that change)."""
CHANGES_KEPT = 64
"""Changes remembered for `changed_since`; a reader further behind looks at every row."""
TABLE_COLUMNS = {"task": "task", "group": "group", "ok": "ok", "reward": "reward", "turns": "turns", "errors": "num_errors", "used": "effective"}
"""`FinishedRows` columns that are the run's own (`EpisodeTable`), by the name the table knows them by."""


def variant_name(kind: str | None, env: str | None) -> str:
    """The env, train and eval apart (`train:gsm8k`, `eval:math`)."""
    return f"{kind or 'train'}:{env or 'env'}"


def _hex(word: str) -> bool:
    """Whether a hex id's text can hold `word`."""
    return HEX_DIGITS.issuperset(word)


def _among(positions: Positions, texts: Mapping[int, object]) -> list[tuple[int, int]]:
    """(index in `positions`, position) of those that `texts` holds (the ids that are not hex)."""
    if not texts:
        return []
    if isinstance(positions, slice):
        return sorted((position - positions.start, position) for position in texts if positions.start <= position < positions.stop)
    at = np.flatnonzero(np.isin(positions, np.fromiter(texts, dtype=np.int64, count=len(texts))))
    return list(zip(at.tolist(), positions[at].tolist(), strict=True))


def _length(positions: Positions) -> int:
    return positions.stop - positions.start if isinstance(positions, slice) else len(positions)


class RunRows:
    """`FinishedRows` over a `PrimeRlRun`'s table; `FollowedRun` adds the rows as the
    index is read (`extend`) and says which changed (`changed`)."""

    def __init__(self, table: EpisodeTable, numbers: Callable[[str], CodedTaskNumbers], keys_of_rollouts: Mapping[str, int]) -> None:
        self._numbers = numbers
        """A variant's task numbers (the variant joins the session on first call)."""
        self._rolled = keys_of_rollouts
        """A rollout's key -> its row, for the rows a rollout stands for."""
        self._version = 0
        self.reset(table)

    def reset(self, table: EpisodeTable) -> None:
        """Rows from scratch: the index was replaced (`table` is the new one's)."""
        self.table = table
        self._variant = Growable(np.int32)
        self._task_index = Growable(np.int32)
        self._number = Growable(np.int32)
        self._has = Growable(np.bool_)
        self._variant_labels: list[str] = []
        self._variant_codes: dict[str, int] = {}
        self._pairs: dict[tuple[int, int], int] = {}
        self._version += 1
        self._log: list[tuple[int, npt.NDArray[np.int64]]] = []
        self._derived: dict[str, tuple[int, npt.NDArray[Any]]] = {}

    # -- FinishedRows ------------------------------------------------------------------

    @property
    def count(self) -> int:
        return self._variant.size

    @property
    def version(self) -> int:
        return self._version

    def column(self, name: str) -> npt.NDArray[Any]:
        count, table = self.count, self.table
        if name == "variant":
            return self._variant.values
        if name == "task_index":
            return self._task_index.values
        if name == "number":
            return self._number.values
        if name in TABLE_COLUMNS:
            found: npt.NDArray[Any] = table.column(TABLE_COLUMNS[name])[:count]
            return found
        if name not in DERIVED:
            raise KeyError(name)
        cached = self._derived.get(name)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        changed = None if cached is None else self.changed_since(cached[0])
        if cached is None or changed is None:
            values = self._derive(name, np.arange(count, dtype=np.int64))
        else:  # the rows added or changed since, not every row: a poll's few among a million
            old = cached[1]
            values = np.concatenate([old, self._derive(name, np.arange(len(old), count, dtype=np.int64))]) if len(old) < count else old
            changed = changed[changed < len(old)]
            values[changed] = self._derive(name, changed)
        self._derived[name] = (self._version, values)
        return values

    def _derive(self, name: str, rows: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        table = self.table
        if name == "tokens":
            given, taken = (table.column(name)[rows].astype(np.int64) for name in ("input_tokens", "output_tokens"))
            # -1: the index reported neither count (not 0 tokens)
            return np.where((given < 0) & (taken < 0), -1, np.maximum(given, 0) + np.maximum(taken, 0))
        if name == "elapsed":
            seconds: npt.NDArray[Any] = np.maximum(table.column("arrival")[rows] - table.column("dispatch")[rows], 0.0)
            return seconds
        steps, source = table.steps(rows)
        return np.where(source != STEP_UNKNOWN, steps, -1)

    def labels(self, name: str) -> list[str]:
        return self._variant_labels if name == "variant" else self.table.labels(name)

    def has_rollout(self) -> npt.NDArray[np.bool_]:
        return self._has.values

    def changed_since(self, version: int) -> npt.NDArray[np.int64] | None:
        if version == self._version:
            return np.zeros(0, dtype=np.int64)
        if not self._log or self._log[0][0] > version + 1:
            return None
        return np.unique(np.concatenate([rows for at, rows in self._log if at > version]))

    def key(self, row: int) -> str:
        return f"{self._variant_labels[int(self._variant.values[row])]}/{self.table.episode_id(row) or f'row-{row}'}"

    def rollout_row(self, key: str) -> int | None:
        return self._rolled.get(key)

    def row_of(self, key: str) -> int | None:
        if (row := self._rolled.get(key)) is not None:
            return row
        variant, _, episode = key.rpartition("/")
        code = self._variant_codes.get(variant)
        if code is None:
            return None
        if episode.startswith("row-") and episode[4:].isdigit():
            row = int(episode[4:])
            found = row if row < self.count and self.table.episode_id(row) is None else -1
        else:
            found = self.table.ids.find(episode)
        return found if 0 <= found < self.count and int(self._variant.values[found]) == code else None

    def trace_ids(self, row: int) -> tuple[str, ...]:
        return tuple(self.table.traces_of(row))

    def containing(self, word: str, rows: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.bool_]:
        count, table = self.count, self.table
        every: Positions = slice(0, count) if rows is None else rows  # a slice reads the columns without a copy
        found = table.ids.holding(every, word) if _hex(word) else np.zeros(_length(every), dtype=bool)
        codes = self._variant.values[every]
        for code, label in enumerate(self._variant_labels):  # the key is the variant, a slash, the episode id
            prefix = label.lower() + "/"
            mine = codes == code
            if word in prefix:
                found |= mine
                continue
            for cut in range(1, len(word)):
                if prefix.endswith(word[:cut]) and _hex(word[cut:]):
                    found |= mine & table.ids.starting(every, word[cut:])
        for at, position in _among(every, table.ids.texts):  # not a hex id (or none): its key read as text
            found[at] = word in self.key(position).lower()
        traces = table.trace_ids
        spans, first, last = self._trace_spans(rows)
        hits = traces.holding(spans, word) if _hex(word) else np.zeros(_length(spans), dtype=bool)
        for at, position in _among(spans, traces.texts):
            text = traces.texts[position]
            hits[at] = text is not None and word in text.lower()
        seen = np.concatenate([[0], np.cumsum(hits)])  # a row holds the word if a hit lies among its traces
        found |= seen[last] > seen[first]
        return found

    def _trace_spans(self, rows: npt.NDArray[np.int64] | None) -> tuple[Positions, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The positions of the trace ids of `rows` (of every row, if None), and where
        among those each row's first and past-its-last are."""
        table = self.table
        starts = table.trace_start  # int32: what is taken of it is widened, not the whole column at each key
        end = int(starts[self.count]) if self.count < len(table) else len(table.trace_ids)
        if rows is None:
            return slice(0, end), starts[: self.count].astype(np.int64), np.append(starts[1 : self.count], end)[: self.count].astype(np.int64)
        following = rows + 1
        first = starts[rows].astype(np.int64)
        lengths = np.maximum(np.where(following < len(table), starts[np.minimum(following, len(table) - 1)], len(table.trace_ids)) - first, 0)
        last = np.cumsum(lengths)
        positions = np.repeat(first - last + lengths, lengths) + np.arange(int(last[-1]) if len(last) else 0, dtype=np.int64)
        return positions, last - lengths, last

    def first_traces(self) -> npt.NDArray[np.float64]:
        count, table = self.count, self.table
        starts = table.trace_start[:count]
        ends = np.append(table.trace_start[1:count], len(table.trace_ids))[:count] if count else starts
        has = ends > starts
        at = np.minimum(starts, max(len(table.trace_ids) - 1, 0))
        high = table.trace_ids.high.values[at] if len(table.trace_ids) else np.zeros(count, np.uint64)
        values = np.where(has, hex_trace_numbers(high), -1.0)
        for position, text in table.trace_ids.texts.items():
            row = int(table.row_of_trace_position(np.array([position]))[0])
            if row < count and int(starts[row]) == position:
                values[row] = trace_number(text)
        return values

    def held(self) -> dict[str, int]:
        """The bytes the rows hold over the run's own columns, by what for
        (docs/performance.md accounts for a row's bytes with them)."""
        own = self._variant.nbytes + self._task_index.nbytes + self._number.nbytes + self._has.nbytes
        derived = sum(values.nbytes for _, values in self._derived.values())
        return {"own columns": own, "derived columns": derived, "changes kept": sum(rows.nbytes for _, rows in self._log)}

    # -- what FollowedRun tells it -----------------------------------------------------

    def variant_code(self, name: str) -> int:
        code = self._variant_codes.get(name)
        if code is None:
            code = self._variant_codes[name] = len(self._variant_labels)
            self._variant_labels.append(name)
        return code

    def extend(self, stop: int) -> set[str]:
        """The table's rows up to `stop` become rows here, numbered by task as a live
        view numbers its rollouts (`CodedTaskNumbers`, shared with the run's rollouts): the
        variants they belong to."""
        start, table = self.count, self.table
        if stop <= start:
            return set()
        kinds, envs = table.column("kind")[start:stop].astype(np.int64), table.column("env")[start:stop].astype(np.int64)
        pairs, at = np.unique(np.stack([kinds, envs], axis=1), axis=0, return_inverse=True)
        variant_of_pair = []
        for kind, env in pairs.tolist():
            code = self._pairs.get((kind, env))
            if code is None:
                kind_text = table.labels("kind")[kind] if kind >= 0 else None
                env_text = table.labels("env")[env] if env >= 0 else None
                code = self._pairs[(kind, env)] = self.variant_code(variant_name(kind_text, env_text))
            variant_of_pair.append(code)
        variants = np.array(variant_of_pair, dtype=np.int64)[at.reshape(-1)]
        which, label = labelled_tasks(table.column("task")[start:stop], table.column("group")[start:stop])
        identities, first, inverse, counts = np.unique(
            np.stack([variants, which, label], axis=1), axis=0, return_index=True, return_inverse=True, return_counts=True
        )
        inverse = inverse.reshape(-1)
        order = np.argsort(inverse, kind="stable")
        rank = np.empty(len(inverse), dtype=np.int64)
        rank[order] = np.arange(len(inverse)) - np.repeat(np.cumsum(counts) - counts, counts)
        first_task = np.zeros(len(identities), dtype=np.int64)
        first_number = np.zeros(len(identities), dtype=np.int64)
        met = np.argsort(first, kind="stable")  # tasks numbered in the order first met, variants joining so too
        for variant in dict.fromkeys(identities[met, 0].tolist()):
            mine = met[identities[met, 0] == variant]
            first_task[mine], first_number[mine] = self._numbers(self._variant_labels[variant]).reserve(
                identities[mine, 1], identities[mine, 2], counts[mine]
            )
        self._variant.extend(variants.astype(np.int32))
        self._task_index.extend(first_task[inverse].astype(np.int32))
        self._number.extend((first_number[inverse] + rank).astype(np.int32))
        has = np.zeros(stop - start, dtype=bool)
        for row in self._rolled.values():
            if start <= row < stop:
                has[row - start] = True
        self._has.extend(has)
        self.changed(np.arange(start, stop, dtype=np.int64))
        return {self._variant_labels[code] for code in set(variant_of_pair)}

    def set_has_rollout(self, row: int) -> None:
        if row < self.count:
            self._has.values[row] = True
            self.changed(np.array([row], dtype=np.int64))

    def changed(self, rows: npt.NDArray[np.int64]) -> None:
        self._version += 1
        self._log.append((self._version, rows))
        del self._log[:-CHANGES_KEPT]
