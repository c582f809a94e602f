"""One served episode rebuilt from its delta stream, as verifiers 0.4.0 rebuilds it.

`traces` holds live dicts, each shaped like a dumped `Trace` plus its `pending`
preview, so a caller can read them after every delta; its committed `nodes` and
`calls` are kept packed (`PackedList`: a sequence equal to the list, decoded when
read). A bad delta raises
`AssemblyError` before anything is changed: the run it belongs to fails, every other
trace (and every other run) stays as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tracewatch.core.errors import TracewatchError
from tracewatch.core.text import short_repr
from tracewatch.core.wire.delta_checks import DeltaValueError, check_delta
from tracewatch.core.wire.packed_list import PackedList, pack_node
from tracewatch.core.wire.protocol import LIST_FIELDS, KeptItems, pack

_OTHER_LISTS = tuple(field for field in LIST_FIELDS if field not in ("nodes", "calls"))
_STRUCTURAL = frozenset({"links", "routing_repairs", *LIST_FIELDS})

KNOWN_KEYS = frozenset(
    {"trace", "discard", "open", "links", "routing_repairs", "set", "pending", *LIST_FIELDS}
)


class AssemblyError(TracewatchError, RuntimeError):
    """A delta or reply that cannot be applied to the episode as assembled so far."""


class EpisodeAssembly:
    def __init__(self) -> None:
        self.traces: dict[str, dict[str, Any]] = {}
        self.unknown: dict[str, dict[str, Any]] = {}
        """Per trace, delta keys this version does not know, latest value kept: a
        newer server's additions are shown to the user rather than dropped."""

    def apply(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        """Apply one delta; return the trace dict it touched (the dropped one for a
        discard)."""
        # `type(...) is dict` first: decoded frames are dicts, and the ABC check that
        # covers other mappings costs more than the rest of a typical delta.
        if type(delta) is not dict and not isinstance(delta, Mapping):
            raise AssemblyError(f"a delta must be a map, got {type(delta).__name__}")
        get = delta.get
        trace_id = get("trace")
        if type(trace_id) is not str:
            raise AssemblyError(f"delta has no 'trace' id: {short_repr(delta, 120)}")
        if get("discard"):
            self.unknown.pop(trace_id, None)
            return self.traces.pop(trace_id, {})
        try:
            check_delta(delta, trace_id)
        except DeltaValueError as error:
            raise AssemblyError(str(error)) from None
        trace = self.traces.get(trace_id)
        opening = trace is None
        if trace is None:
            trace = _opened(get("open"), trace_id)
        # most deltas are a preview or scalars: one set test skips the list work
        lists = None if _STRUCTURAL.isdisjoint(delta) else _ListChanges(delta, trace, trace_id)
        scalars = get("set")
        if scalars is not None and type(scalars) is not dict and not isinstance(scalars, Mapping):
            raise AssemblyError(f"trace {trace_id}: 'set' must be a map, got {type(scalars).__name__}")
        # Everything is checked and computed; from here on nothing can fail half-way.
        if opening:
            self.traces[trace_id] = trace
        if lists is not None:
            lists.commit(trace)
        if scalars:
            trace.update(scalars)
        if "pending" in delta:
            trace["pending"] = delta["pending"]
        if not KNOWN_KEYS.issuperset(delta):
            extra = self.unknown.setdefault(trace_id, {})
            extra.update((key, value) for key, value in delta.items() if key not in KNOWN_KEYS)
        return trace

    def finish(self, head: Mapping[str, Any], summaries: Iterable[Any], partial: bool = False) -> dict[str, Any]:
        """The episode record: `head` joined with the assembled traces in the server's
        order. The counts are the server's word on what streamed: a mismatch means a
        delta was lost, an error unless `partial` (a watcher that knows it lost some
        keeps what it saw)."""
        if not isinstance(head, Mapping):
            raise AssemblyError(f"the episode head is a {type(head).__name__}, not a map")
        traces = []
        for summary in summaries if isinstance(summaries, Iterable) else ():
            trace_id, nodes, calls = _summary_fields(summary)
            trace = self.traces.get(trace_id)
            if trace is None:
                if partial:
                    continue
                raise AssemblyError(f"served episode is missing trace {trace_id}")
            if not partial and (len(trace["nodes"]) != nodes or len(trace["calls"]) != calls):
                raise AssemblyError(
                    f"trace {trace_id} assembled {len(trace['nodes'])} nodes / "
                    f"{len(trace['calls'])} calls, the server reports {nodes} / {calls}"
                )
            traces.append({key: value for key, value in trace.items() if key != "pending"})
        return {**head, "traces": traces}


def _opened(header: Any, trace_id: str) -> dict[str, Any]:
    """A new trace from its `open` header, with every list empty. Its id is the header's,
    as verifiers keeps it, when that is text; else (5, null, none) the one its deltas
    name it by: an id of another type made the recorded reply's trace summaries
    unreadable, so a run done live failed in replay."""
    if not isinstance(header, Mapping):
        raise AssemblyError(
            f"delta for trace {trace_id} which was never opened "
            "(no 'open' header): was an earlier delta lost?"
        )
    own_id = header.get("id")
    trace = {**header, "id": own_id if type(own_id) is str else trace_id, **{field: [] for field in LIST_FIELDS}, "pending": []}
    trace["nodes"], trace["calls"] = PackedList(), PackedList()
    return trace


class _ListChanges:
    """A delta's list work, checked and packed on construction so that `commit`
    cannot fail half-way: changed nodes, new nodes and calls, other appends."""

    __slots__ = ("changed", "new_nodes", "new_calls", "appends")

    def __init__(self, delta: Mapping[str, Any], trace: dict[str, Any], trace_id: str) -> None:
        get = delta.get
        links, repairs = get("links"), get("routing_repairs")
        self.changed = _changed_nodes(links, repairs, trace_id, trace["nodes"]) if links or repairs else {}
        raw = get("nodes")
        self.new_nodes = None if raw is None else _packed_nodes(raw, trace_id)
        raw = get("calls")
        self.new_calls = None if raw is None else _packed_calls(raw, trace_id)
        self.appends: list[tuple[list[Any], list[Any]]] = []
        for field in _OTHER_LISTS:
            items = get(field)
            if items is not None:
                if type(items) is not list:
                    raise AssemblyError(f"trace {trace_id}: '{field}' must be a list, got {type(items).__name__}")
                self.appends.append((trace[field], items))

    def commit(self, trace: dict[str, Any]) -> None:
        nodes = trace["nodes"]
        for index, packed in self.changed.items():
            nodes.replace(index, packed)
        if self.new_nodes is not None:
            nodes.extend_packed(self.new_nodes)
            trace["pending"] = []
        if self.new_calls is not None:
            trace["calls"].extend_packed(self.new_calls)
        for target, items in self.appends:
            target.extend(items)


def _summary_fields(summary: Any) -> tuple[str, int, int]:
    """A trace summary's id and counts (a map, or a `TraceSummary`), checked."""
    fields = (
        (summary.get("id"), summary.get("nodes"), summary.get("calls"))
        if isinstance(summary, Mapping)
        else (getattr(summary, "id", None), getattr(summary, "nodes", None), getattr(summary, "calls", None))
    )
    trace_id, nodes, calls = fields
    if type(trace_id) is not str or type(nodes) is not int or type(calls) is not int:
        raise AssemblyError(f"a trace summary must have a text id and node and call counts, got {short_repr(summary)}")
    return trace_id, nodes, calls


def _indexed(value: Any, key: str, trace_id: str, count: int) -> list[tuple[int, Any]]:
    """Node-keyed map entries with int indices (msgpack may hand keys back as str),
    each checked to name a node the trace already holds."""
    if not isinstance(value, Mapping):
        raise AssemblyError(f"trace {trace_id}: '{key}' must map node index to items")
    entries = []
    for raw, item in value.items():
        try:
            index = int(raw)
        except (TypeError, ValueError):
            raise AssemblyError(f"trace {trace_id}: '{key}' has a non-integer node index {raw!r}") from None
        if not 0 <= index < count:
            raise AssemblyError(
                f"trace {trace_id}: '{key}' names node {index}, but the trace has {count} nodes"
            )
        entries.append((index, item))
    return entries


def _links(value: Any, trace_id: str, count: int) -> list[tuple[int, list[Any]]]:
    entries = _indexed(value, "links", trace_id, count)
    for index, links in entries:
        if type(links) is not list:
            raise AssemblyError(f"trace {trace_id}: 'links[{index}]' must be a list, got {type(links).__name__}")
    return entries


def _packed_nodes(new_nodes: Any, trace_id: str) -> list[bytes]:
    """The delta's nodes packed (`pack_node`), each with a semantic_parents list as
    verifiers' assembly gives it; a node that came with its bytes (`KeptItems`) and
    already has that list is kept as those bytes. The delta stays as the caller
    received it."""
    kind = type(new_nodes)
    if kind is not list and kind is not KeptItems:
        raise AssemblyError(f"trace {trace_id}: 'nodes' must be a list, got {kind.__name__}")
    try:
        if kind is KeptItems:
            return [
                raw if type(node) is dict and type(node.get("semantic_parents")) is list else _kept(node)
                for node, raw in zip(new_nodes, new_nodes.raw)
            ]
        return [_kept(node) for node in new_nodes]
    except (TypeError, AttributeError):
        raise AssemblyError(f"trace {trace_id}: 'nodes' holds a non-map item") from None
    except ValueError as error:
        raise AssemblyError(f"trace {trace_id}: a node cannot be kept ({error})") from None


def _packed_calls(calls: Any, trace_id: str) -> list[bytes]:
    """The delta's calls packed, or kept as the bytes they came in as (`KeptItems`)."""
    kind = type(calls)
    if kind is KeptItems:
        return list(calls.raw)
    if kind is not list:
        raise AssemblyError(f"trace {trace_id}: 'calls' must be a list, got {kind.__name__}")
    try:
        return [pack(call) for call in calls]
    except (TypeError, ValueError) as error:
        raise AssemblyError(f"trace {trace_id}: a call cannot be kept ({error})") from None


def _kept(node: Any) -> bytes:
    if type(node) is dict and type(node.get("semantic_parents")) is list:
        return pack_node(node)
    return pack_node({**node, "semantic_parents": list(node.get("semantic_parents") or ())})


def _changed_nodes(links: Any, repairs: Any, trace_id: str, nodes: PackedList) -> dict[int, bytes]:
    """Each node a `links` or `routing_repairs` entry changes, packed again with its
    new semantic parents and `routed_experts`, computed before anything changes."""
    changed: dict[int, dict[str, Any]] = {}
    for index, new_links in _links(links, trace_id, len(nodes)) if links else ():
        node = changed.get(index) or nodes[index]
        node["semantic_parents"] = [*node["semantic_parents"], *new_links]
        changed[index] = node
    for index, row in _indexed(repairs, "routing_repairs", trace_id, len(nodes)) if repairs else ():
        node = changed.get(index) or nodes[index]
        node["routed_experts"] = _repair_final_row(node.get("routed_experts"), row, trace_id, index)
        changed[index] = node
    try:
        return {index: pack_node(node) for index, node in changed.items()}
    except (TypeError, ValueError) as error:
        raise AssemblyError(f"trace {trace_id}: a linked node cannot be kept ({error})") from None


def _repair_final_row(encoded: Any, row: Any, trace_id: str, index: int) -> dict[str, Any]:
    """Replace an encoded array's last row, as numpy concatenation would (a repair can
    widen the dtype). A new dict: decoded rows alias the delta's bytes, which stay
    untouched for other consumers."""
    import numpy as np  # only routed-expert streams carry repairs; keep startup light

    def decode(item: dict[str, Any]) -> Any:
        return np.frombuffer(item["data"], dtype=np.dtype(item["dtype"])).reshape(item["shape"])

    try:
        joined = np.ascontiguousarray(np.concatenate([decode(encoded)[:-1], decode(row)]))
    except Exception as error:  # noqa: BLE001 - any malformed array is the delta's fault
        raise AssemblyError(
            f"trace {trace_id}: routing repair of node {index} cannot be applied ({error!r})"
        ) from None
    return {"__nd__": True, "dtype": str(joined.dtype), "shape": list(joined.shape), "data": joined.tobytes()}


def streamed_counts(summaries: Iterable[Any]) -> tuple[int, int]:
    """The nodes and calls the server says its traces streamed, all told."""
    nodes = calls = 0
    for summary in summaries if isinstance(summaries, Iterable) else ():
        _, trace_nodes, trace_calls = _summary_fields(summary)
        nodes, calls = nodes + trace_nodes, calls + trace_calls
    return nodes, calls
