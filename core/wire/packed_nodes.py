"""A trace's committed nodes kept as msgpack bytes, one per node, decoded when read.

Decoded, a node is a dozen dicts, lists and strings (about 2.5 kB for a 100-token
node, 1.5 kB on the wire), and every full garbage collection walks each of them. Kept
as its bytes a node costs about its wire size and is nothing for the collector to walk
(issue 13). Committed nodes never change but for a `links` or `routing_repairs` delta,
which packs the node again. A reader (the transcript on screen, an export, a compare)
gets each node decoded as a delta's nodes are (`unpack_node`: long token arrays stay
`Packed`), equal to the node that was appended.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from core.wire.protocol import PACKED_FIELDS, Packed, pack, unpack_node

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


class PackedNodes(Sequence[dict[str, Any]]):
    """A trace's `nodes` list: equal to the list of the nodes it holds, indexed,
    iterated and validated (pydantic takes any sequence) as that list; each read
    decodes a fresh dict, so a change to one is not kept (`replace` keeps it)."""

    __slots__ = ("_raw",)

    def __init__(self, nodes: Iterable[dict[Any, Any]] = ()) -> None:
        self._raw: list[bytes] = [pack_node(node) for node in nodes]

    def append_packed(self, packed: Iterable[bytes]) -> None:
        """Append nodes `pack_node` packed (before anything changed: it can fail)."""
        self._raw.extend(packed)

    def replace(self, index: int, packed: bytes) -> None:
        self._raw[index] = packed

    @property
    def nbytes(self) -> int:
        """The packed nodes' bytes: what the nodes cost beyond a list of bytes objects."""
        return sum(map(len, self._raw))

    def __len__(self) -> int:
        return len(self._raw)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [unpack_node(raw) for raw in self._raw[index]]
        return unpack_node(self._raw[index])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(unpack_node, self._raw)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedNodes):
            return self._raw == other._raw or list(self) == list(other)
        if isinstance(other, list):
            return len(other) == len(self._raw) and list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedNodes({len(self._raw)} nodes, {self.nbytes} bytes)"

