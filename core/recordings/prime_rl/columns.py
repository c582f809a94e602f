"""Columns of numbers and strings that grow by blocks, for a million rows in little memory.

A row is a position in every column of a table. Numbers are numpy arrays (floats NaN
where a value is absent or not a number, integers `MISSING`); a text value that repeats
(an env, a group, a stop condition) is a code into its column's labels (`Interned`); a
verifiers id (32 lowercase hex digits) is kept as its 16 bytes (`Ids`), anything else
as the text itself. Values come from files anyone could have written: each block is
converted in one numpy call when every value has the expected type, and value by
value otherwise, so a wrong type costs a slow block, never a wrong number.
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

MISSING = -1
"""An integer column's value when the row had none, or one that was not an integer."""
Positions = np.ndarray[Any, Any] | slice
"""Some positions of a column, or a run of them (read without a copy)."""

_GROWTH = 1.5
_FIRST = 1024
_MAPPED = 1 << 20
"""Columns of this many bytes or more are mapped, not taken from the heap (`_empty`)."""


class Growable:
    """One numpy column with room to grow; `values` is the filled part (a view)."""

    __slots__ = ("_data", "size")

    def __init__(self, dtype: npt.DTypeLike) -> None:
        self._data: np.ndarray[Any, Any] = np.empty(0, dtype=dtype)
        self.size = 0

    @property
    def values(self) -> np.ndarray[Any, Any]:
        return self._data[: self.size]

    @property
    def nbytes(self) -> int:
        return self.size * self._data.itemsize

    def extend(self, block: np.ndarray[Any, Any]) -> None:
        end = self.size + len(block)
        if end > len(self._data):
            grown = _empty(max(end, _FIRST, int(len(self._data) * _GROWTH)), self._data.dtype)
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size : end] = block
        self.size = end


def _empty(count: int, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """Room for `count` values. A large column lives in its own anonymous mapping: its
    pages are resident only once written, and the mapping goes back to the system
    whole when the column outgrows it (the heap would keep the old copy's pages)."""
    size = count * dtype.itemsize
    if size < _MAPPED:
        return np.empty(count, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, size), dtype=dtype)


def floats(values: Sequence[Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Numbers as float64, NaN for anything absent or not a number (a bool is not one)."""
    kinds = set(map(type, values))
    if kinds <= {float, int, type(None)}:
        try:
            return np.array(values, dtype=np.float64)
        except OverflowError:
            pass
    return np.array([_float(value) for value in values], dtype=np.float64)


def _float(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            return math.copysign(math.inf, value)
    return math.nan


def integers(values: Sequence[Any], dtype: npt.DTypeLike = np.int64) -> np.ndarray[Any, Any]:
    """Integers, `MISSING` for anything absent, not an integer, or out of the dtype's range."""
    if set(map(type, values)) <= {int}:
        try:
            return np.array(values, dtype=dtype)
        except OverflowError:
            pass
    info = np.iinfo(dtype)
    return np.array(
        [value if type(value) is int and info.min <= value <= info.max else MISSING for value in values], dtype=dtype
    )


def flags(values: Sequence[Any]) -> np.ndarray[Any, np.dtype[np.int8]]:
    """Booleans as 1 and 0, `MISSING` for anything else."""
    return np.array([1 if value is True else 0 if value is False else MISSING for value in values], dtype=np.int8)


class Interned:
    """A text column of few distinct values: a code per row into `labels`."""

    __slots__ = ("codes", "labels", "_code")

    def __init__(self, dtype: npt.DTypeLike = np.int32) -> None:
        self.codes = Growable(dtype)
        self.labels: list[str] = []
        self._code: dict[str, int] = {}

    def code(self, label: str) -> int:
        """`label`'s code, added if new."""
        code = self._code.get(label)
        if code is None:
            code = self._code[label] = len(self.labels)
            self.labels.append(label)
        return code

    def find(self, label: str) -> int:
        """`label`'s code, `MISSING` if no row has it."""
        return self._code.get(label, MISSING)

    def encode(self, values: Sequence[Any]) -> list[int]:
        try:
            distinct = set(values)
        except TypeError:  # an unhashable value (a list, a map): not a label
            code = self.code
            return [code(value) if type(value) is str else MISSING for value in values]
        for value in distinct:
            if type(value) is str and value not in self._code:
                self.code(value)
        known = self._code
        return [known.get(value, MISSING) for value in values]  # only texts are keys

    def extend(self, values: Sequence[Any]) -> None:
        self.codes.extend(np.array(self.encode(values), dtype=self.codes.values.dtype))

    def label(self, row: int) -> str | None:
        code = int(self.codes.values[row])
        return None if code < 0 else self.labels[code]

    def set(self, row: int, label: str) -> None:
        self.codes.values[row] = self.code(label)


_NIBBLE = np.full(256, 255, dtype=np.uint8)
_NIBBLE[np.frombuffer(b"0123456789", dtype=np.uint8)] = np.arange(10, dtype=np.uint8)
_NIBBLE[np.frombuffer(b"abcdef", dtype=np.uint8)] = np.arange(10, 16, dtype=np.uint8)
HEX_ID = 32
_MASK = (1 << 64) - 1


HEX_DIGITS = frozenset("0123456789abcdef")
"""What a verifiers id's text is made of (lower case)."""
FOLD_FROM = 1 << 14
"""Ids not yet in the sorted index from which they are folded into it (before, a
lookup scans them)."""


def id_key(text: str) -> tuple[int, int, bool]:
    """(key, low word, whether packed) of one id: a 32-hex id's two 64-bit halves, any
    other text's hash as its key (verified against the text on every match)."""
    if len(text) == HEX_ID and HEX_DIGITS.issuperset(text):
        number = int(text, 16)
        return number >> 64, number & _MASK, True
    return hash(text) & _MASK, 0, False


def _packed(texts: Sequence[str]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(high words, low words, which are hex ids) of texts of 32 ASCII characters."""
    raw = np.frombuffer("".join(texts).encode("ascii"), dtype=np.uint8).reshape(len(texts), HEX_ID)
    nibbles = _NIBBLE[raw]
    ok = nibbles.max(axis=1) <= 15
    pairs = (nibbles[:, 0::2] << 4 | nibbles[:, 1::2]).astype(np.uint8)
    words = np.ascontiguousarray(pairs).view(">u8").astype(np.uint64)
    return words[:, 0], words[:, 1], ok


class Ids:
    """Ids, 16 bytes each when they are verifiers' hex ids, with a sorted index for
    lookups (`find`): each id's leading 32 bits and its position, 8 bytes an id (a
    match of those bits is checked against the whole id). A position whose id was not
    hex text is in `texts` (None: no id)."""

    __slots__ = ("high", "low", "texts", "_sorted_keys", "_sorted_positions", "_indexed")

    def __init__(self) -> None:
        self.high = Growable(np.uint64)
        self.low = Growable(np.uint64)
        self.texts: dict[int, str | None] = {}
        self._sorted_keys = np.empty(0, dtype=np.uint32)
        self._sorted_positions = np.empty(0, dtype=np.int32)
        self._indexed = 0
        """Positions before this are in the sorted index; the rest are scanned."""

    def __len__(self) -> int:
        return self.high.size

    def extend(self, values: Sequence[Any]) -> None:
        start, count = self.high.size, len(values)
        eligible = [type(value) is str and len(value) == HEX_ID and value.isascii() for value in values]
        if all(eligible):
            high, low, ok = _packed(values) if count else (np.zeros(0, np.uint64),) * 2 + (np.zeros(0, bool),)
        else:
            high, low, ok = np.zeros(count, np.uint64), np.zeros(count, np.uint64), np.zeros(count, bool)
            chosen = [index for index, good in enumerate(eligible) if good]
            if chosen:
                high[chosen], low[chosen], ok[chosen] = _packed([values[index] for index in chosen])
        for index in np.flatnonzero(~ok).tolist():
            value = values[index]
            text = value if type(value) is str else None
            key, word, packed = id_key(text) if text is not None else (0, 0, False)
            high[index], low[index] = key, word
            if not packed:
                self.texts[start + index] = text
        self.high.extend(high)
        self.low.extend(low)

    def get(self, position: int) -> str | None:
        if position in self.texts:
            return self.texts[position]
        return f"{int(self.high.values[position]):016x}{int(self.low.values[position]):016x}"

    def many(self, start: int, stop: int) -> list[str | None]:
        return [self.get(position) for position in range(start, stop)]

    def find(self, text: str) -> int:
        """The first position holding `text`, `MISSING` if none."""
        return self.find_many([text])[0]

    def find_many(self, texts: Sequence[str]) -> list[int]:
        """The first position holding each of `texts` (`MISSING` if none), in one pass."""
        if not texts:
            return []
        self._index()
        keyed = [id_key(text) for text in texts]
        query = np.array([key for key, _, _ in keyed], dtype=np.uint64)
        prefixes = _prefix(query)
        left = np.searchsorted(self._sorted_keys, prefixes, "left").tolist()
        right = np.searchsorted(self._sorted_keys, prefixes, "right").tolist()
        tail = self.high.values[self._indexed :]
        in_tail: dict[int, list[int]] = {}
        for position in (np.flatnonzero(np.isin(tail, query)) + self._indexed).tolist():
            in_tail.setdefault(int(self.high.values[position]), []).append(position)
        found = []
        for index, (text, (key, word, packed)) in enumerate(zip(texts, keyed)):
            candidates = sorted(self._sorted_positions[left[index] : right[index]].tolist()) + in_tail.get(key, [])
            found.append(next((p for p in candidates if self._matches(p, text, key, word, packed)), MISSING))
        return found

    def locate(self, other: Ids, positions: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Where each of `other`'s ids at `positions` is here (`MISSING`: nowhere), for
        many at once: the first of the ids of its leading bits that is it."""
        self._index()
        high, low = other.high.values[positions], other.low.values[positions]
        wanted = _prefix(high)
        found = np.full(len(positions), MISSING, dtype=np.int64)
        for keys, order in ((self._sorted_keys, self._sorted_positions), self._tail_order()):
            todo = np.flatnonzero(found < 0)
            at = np.searchsorted(keys, wanted[todo], "left")
            while len(todo):  # each round, the next id of the same leading bits
                inside = at < len(keys)
                todo, at = todo[inside], at[inside]
                same = keys[at] == wanted[todo]
                todo, at = todo[same], at[same]
                candidate = order[at].astype(np.int64)
                hit = (self.high.values[candidate] == high[todo]) & (self.low.values[candidate] == low[todo])
                found[todo[hit]] = candidate[hit]
                todo, at = todo[~hit], at[~hit] + 1
        if other.texts or self.texts:
            for index, position in enumerate(positions.tolist()):
                if position in other.texts or int(found[index]) in self.texts:
                    text = other.get(position)
                    found[index] = MISSING if text is None else self.find(text)
        return found

    def _tail_order(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        tail = _prefix(self.high.values[self._indexed :])
        order = np.argsort(tail, kind="stable")
        return tail[order], order + self._indexed

    def _matches(self, position: int, text: str, key: int, word: int, packed: bool) -> bool:
        if packed:
            return position not in self.texts and int(self.high.values[position]) == key and int(self.low.values[position]) == word
        return position in self.texts and self.texts[position] == text

    def _index(self) -> None:
        """Fold the unindexed tail into the sorted index once it is a sizeable share."""
        tail = self.high.size - self._indexed
        if tail < max(FOLD_FROM, len(self._sorted_keys) // 16):
            return
        keys = _prefix(self.high.values[self._indexed :])
        order = np.argsort(keys, kind="stable")
        new_keys, new_positions = keys[order], (order + self._indexed).astype(np.int32)
        at = np.searchsorted(self._sorted_keys, new_keys, "right")
        self._sorted_keys = _inserted(self._sorted_keys, at, new_keys)
        self._sorted_positions = _inserted(self._sorted_positions, at, new_positions)
        self._indexed = self.high.size

    def holding(self, positions: Positions, word: str) -> np.ndarray[Any, Any]:
        """Which of the hex ids at `positions` hold the hex digits `word` (lower case)
        somewhere. Matched on the packed words, up to `SWAR_DIGITS` digits at once;
        a longer word's ids are those holding its first digits, read as texts. A
        position in `texts` gets any answer: its text is the one to ask."""
        high, low = self.high.values[positions], self.low.values[positions]
        if not word:
            return np.ones(len(high), dtype=bool)
        first = [int(digit, 16) for digit in word[:SWAR_DIGITS]]
        found = np.empty(len(high), dtype=bool)
        size = min(len(high), _BLOCK)
        hit, marks, scratch, middle = (np.empty(size, dtype=np.uint64) for _ in range(4))
        for at in range(0, len(high), _BLOCK):  # a block at a time: the scratch stays in the cache
            top, bottom, held = high[at : at + _BLOCK], low[at : at + _BLOCK], found[at : at + _BLOCK]
            held[:] = False
            windows = [top, bottom]  # digits 0-15 and 16-31; and 8-23, for a word across the halves
            if len(first) > 1:
                across = middle[: len(top)]
                np.left_shift(top, np.uint64(32), out=across)
                across |= bottom >> np.uint64(32)
                windows.append(across)
            block_hit, block_marks, block_scratch = hit[: len(top)], marks[: len(top)], scratch[: len(top)]
            for words in windows:
                _digit_marks(words, first[0], block_hit, block_scratch)
                for shift, digit in enumerate(first[1:], start=1):  # the next digit one place on
                    _digit_marks(words, digit, block_marks, block_scratch)
                    block_marks <<= np.uint64(4 * shift)
                    block_hit &= block_marks
                held |= block_hit != 0
        if len(word) > SWAR_DIGITS:
            some = np.flatnonzero(found)
            found[some] = np.strings.find(_hex_texts(high[some], low[some]), word.encode("ascii")) >= 0
        return found

    def starting(self, positions: Positions, word: str) -> np.ndarray[Any, Any]:
        """Which of the hex ids at `positions` start with the hex digits `word` (a
        position in `texts`: any answer, as `holding`)."""
        high, low = self.high.values[positions], self.low.values[positions]
        if len(word) > HEX_ID or not word:
            return np.full(len(high), not word)
        top, bottom = word[:16], word[16:]
        found = high >> np.uint64(4 * (16 - len(top))) == np.uint64(int(top, 16))
        if bottom:
            found &= low >> np.uint64(4 * (16 - len(bottom))) == np.uint64(int(bottom, 16))
        return np.asarray(found)

    @property
    def nbytes(self) -> int:
        return self.high.nbytes + self.low.nbytes + self._sorted_keys.nbytes + self._sorted_positions.nbytes


SWAR_DIGITS = 4
"""Digits of a word matched against every id at once on the packed words (`holding`):
about 8 array passes a digit, and four leave a few rows in ten thousand to read as texts."""
_BLOCK = 1 << 15
"""Ids `holding` weighs at once: its four scratch arrays (256 KiB each) stay in the cache."""
_SEVENS = np.uint64(0x7777777777777777)
_ONES = 0x1111111111111111
_BYTE_DIGITS = np.array([ord(f"{byte:02x}"[0]) | ord(f"{byte:02x}"[1]) << 8 for byte in range(256)], dtype="<u2")
"""A byte's two hex digits, the first in the low byte: one lookup a byte."""


def _digit_marks(words: np.ndarray[Any, Any], digit: int, marks: np.ndarray[Any, Any], scratch: np.ndarray[Any, Any]) -> None:
    """Into `marks`: per 4-bit place of each word, its top bit set where the place
    holds `digit`, every place at once. Exact: (x & 7) + 7 carries into a place's top
    bit unless its low bits are 0, and never past the place."""
    np.bitwise_xor(words, np.uint64(digit * _ONES), out=scratch)
    np.bitwise_and(scratch, _SEVENS, out=marks)
    marks += _SEVENS
    marks |= scratch
    marks |= _SEVENS
    np.invert(marks, out=marks)


def _hex_texts(high: np.ndarray[Any, Any], low: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Packed ids as 32-byte lower-case hex texts."""
    words = np.empty((len(high), 2), dtype=">u8")
    words[:, 0], words[:, 1] = high, low
    return _BYTE_DIGITS[words.view(np.uint8)].view("S32").reshape(len(high))


def _prefix(keys: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """An id key's leading 32 bits, what the sorted index keeps of it."""
    return (keys >> np.uint64(32)).astype(np.uint32)


def _inserted(into: np.ndarray[Any, Any], at: np.ndarray[Any, Any], values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """`np.insert(into, at, values)` for sorted `at`, into a new array of its own mapping
    when large (`_empty`): the old one goes back to the system whole, where the heap
    would keep a hole of its size."""
    found = _empty(len(into) + len(values), into.dtype)
    where = at + np.arange(len(values))
    rest = np.ones(len(found), dtype=bool)
    rest[where] = False
    found[where] = values
    found[rest] = into
    return found
