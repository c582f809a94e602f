"""A trace's committed nodes and model calls kept as msgpack bytes, one per item,
decoded when read.

Decoded, a node is a dozen dicts, lists and strings (more memory than its wire size)
and a call four dicts, and every full garbage collection walks each of them. Kept as
its bytes an item costs about its wire size and is nothing for the collector to walk. Committed items never change but for a `links`
or `routing_repairs` delta, which packs the node again. A reader (the transcript on
screen, an export, a compare) gets each item decoded as a delta's nodes are
(`unpack_node`: long token arrays stay `Packed`), equal to the item that was appended.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from tracewatch.core.wire.protocol import PACKED_FIELDS, Packed, pack, unpack_node

_PACKED_KEYS = {key: pack(key) for key in PACKED_FIELDS}
_MAP_HEADER_SIZE = {0xDE: 3, 0xDF: 5}
"""Bytes before a msgpack map's first key: map16 and map32; a fixmap's is 1."""


def _map_header(count: int) -> bytes:
    if count < 16:
        return bytes((0x80 | count,))
    if count < 1 << 16:
        return b"\xde" + count.to_bytes(2, "big")
    return b"\xdf" + count.to_bytes(4, "big")


def _entries(items: dict[Any, Any]) -> bytes:
    """The keys and values of a packed map, without its header."""
    packed = pack(items)
    return packed[_MAP_HEADER_SIZE.get(packed[0], 1) :]


def pack_node(node: dict[Any, Any]) -> bytes:
    """`node` as one msgpack map, keys in their order; a `Packed` array is spliced in
    as the bytes it holds, never decoded. TypeError or ValueError for a value msgpack
    cannot hold."""
    if not any(type(value) is Packed for value in node.values()):
        return pack(node)
    parts: list[bytes | memoryview] = [_map_header(len(node))]
    run: dict[Any, Any] = {}
    for key, value in node.items():
        if type(value) is Packed:
            if run:
                parts.append(_entries(run))
                run = {}
            parts.append(_PACKED_KEYS.get(key) or pack(key))
            parts.append(value.raw)
        else:
            run[key] = value
    if run:
        parts.append(_entries(run))
    return b"".join(parts)


class PackedList(Sequence[Any]):
    """A trace's `nodes` or `calls` list: equal to the list of the items it holds,
    indexed, iterated and validated (pydantic takes any sequence) as that list; each
    read decodes a fresh item, so a change to one is not kept (`replace` keeps it)."""

    __slots__ = ("_raw",)

    def __init__(self) -> None:
        self._raw: list[bytes] = []

    def extend_packed(self, packed: Iterable[bytes]) -> None:
        """Append items packed by `pack_node` or `pack` (before anything changed:
        packing can fail)."""
        self._raw.extend(packed)

    def replace(self, index: int, packed: bytes) -> None:
        self._raw[index] = packed

    @property
    def nbytes(self) -> int:
        """The packed items' bytes: what they cost beyond a list of bytes objects."""
        return sum(map(len, self._raw))

    def __len__(self) -> int:
        return len(self._raw)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [unpack_node(raw) for raw in self._raw[index]]
        return unpack_node(self._raw[index])

    def __iter__(self) -> Iterator[Any]:
        return map(unpack_node, self._raw)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedList):
            return self._raw == other._raw or list(self) == list(other)
        if isinstance(other, list):
            return len(other) == len(self._raw) and list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedList({len(self._raw)} items, {self.nbytes} bytes)"

