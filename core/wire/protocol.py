"""The env-serve wire of verifiers 0.4.0 (`verifiers/v1/serve/`), spoken byte for byte.

A client DEALER sends `[request_id, method, msgpack(payload)]`; the server ROUTER
answers `[request_id, kind, msgpack(data)]` where `kind` is `delta` (zero or more per
run) or `reply` (exactly one). The models here are ours, shaped like verifiers' so
that a dumped request validates on its server and its replies validate here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Literal, Required, TypedDict, TypeVar

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tracewatch.core.errors import TracewatchError
from tracewatch.core.text import short_repr
from tracewatch_guest.framing import ABORTED_ERROR as ABORTED_ERROR  # verifiers' words, which guest code sends too

KIND_DELTA = b"delta"
KIND_REPLY = b"reply"

LIST_FIELDS = (
    "nodes",
    "calls",
    "errors",
    "extra_usage",
    "request_rewrites",
    "response_rewrites",
)
"""A trace's append-only lists: each delta carries the items past what was sent."""

Phase = Literal["boot", "setup", "agent", "finalize", "scoring"]
PHASES: tuple[Phase, ...] = ("boot", "setup", "agent", "finalize", "scoring")
"""The timing spans of a trace, in the order a rollout passes through them."""

AgentPart = Literal["model", "harness"]
AGENT_PARTS: tuple[AgentPart, ...] = ("model", "harness")
"""The agent span's two parts, as the server times them."""


def is_aborted(error: str | None) -> bool:
    """Whether a run's reply error is the server's abort (its exact words, not any
    error that mentions a cancel)."""
    return error is not None and error.startswith(ABORTED_ERROR)


_packers = threading.local()
"""One Packer a thread: `packb` makes a new one each call (a microsecond, paid for
every node the assembly keeps); a packer resets itself when a pack fails."""


def pack(payload: Any) -> bytes:
    packer = getattr(_packers, "packer", None)
    if packer is None:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True, default=packable)
    packed: bytes = packer.pack(payload)
    return packed


UNPACK_OPTIONS: dict[str, Any] = {"raw": False, "strict_map_key": False}
"""How every msgpack this project reads is decoded: `links` and `routing_repairs`
are keyed by node index, so map keys may be ints."""


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, **UNPACK_OPTIONS)


PACKED_FIELDS = frozenset(
    {
        "token_ids", "mask", "is_content", "sampling_mask", "logprobs", "reference_logprobs",
        "trainer_logprobs", "entropies", "advantages", "loss_weights",
    }
)  # fmt: skip
"""A node's per-token arrays: most of a training rollout's bytes, never drawn."""
PACKED_MIN_BYTES = 64
"""Shorter spans are decoded as they come: a few numbers cost less as a list."""
_ARRAY_MARKERS = frozenset({*range(0x90, 0xA0), 0xDC, 0xDD})
_MAP_MARKERS = frozenset({*range(0x80, 0x90), 0xDE, 0xDF})
_TOKEN_KEYS = (msgpack.packb("token_ids"), msgpack.packb("logprobs"))
_LONG_ARRAY = (0xDC, 0xDD)
"""How msgpack starts an array of 16 items or more."""
_LONG_ARRAY_BYTES = tuple(bytes([marker]) for marker in _LONG_ARRAY)


def _has_long_token_array(data: bytes) -> bool:
    """Whether a frame holds a token array of 16 items or more (its key, then a long
    array's marker): a frame without one (most of an eval's stream) is read whole,
    at C speed. Most frames hold neither marker byte anywhere, which two `memchr`
    scans tell far sooner than searching for the keys."""
    if _LONG_ARRAY_BYTES[0] not in data and _LONG_ARRAY_BYTES[1] not in data:
        return False
    for key in _TOKEN_KEYS:
        at = data.find(key)
        while at >= 0:
            end = at + len(key)
            if end < len(data) and data[end] in _LONG_ARRAY:
                return True
            at = data.find(key, end)
    return False


class Packed:
    """A node's token array kept as the msgpack bytes the wire carried (about a fifth
    of the list it decodes to, and nothing for the garbage collector to walk),
    decoded on demand: equal to that list, and packed back as it. `raw` is a view
    of the frame (or of a kept node) it was read from: reading one copies nothing,
    and keeping its node (`pack_node`) copies it once."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes | memoryview) -> None:
        self.raw = raw

    def decode(self) -> list[Any]:
        items: list[Any] = msgpack.unpackb(self.raw, **UNPACK_OPTIONS)
        return items

    def __len__(self) -> int:
        marker = self.raw[0]
        if marker == 0xDC:
            return int.from_bytes(self.raw[1:3], "big")
        if marker == 0xDD:
            return int.from_bytes(self.raw[1:5], "big")
        return marker & 0x0F

    def __iter__(self) -> Iterator[Any]:
        return iter(self.decode())

    def __getitem__(self, index: Any) -> Any:
        return self.decode()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Packed):
            return self.raw == other.raw or self.decode() == other.decode()
        if isinstance(other, list):
            return self.decode() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Packed({len(self)} items, {len(self.raw)} bytes)"


# The shapes of the dicts a trace arrives as: verifiers' models (`verifiers/v1/trace.py`,
# `graph.py`, `types.py`) dumped to msgpack. They name the keys for the reader and the
# type checker; nothing checks a value against them at runtime (the boundary checks in
# `delta_checks` check some, and a recording opened offline none), so a reader still
# guards the values it draws. total=False: a key may be missing from what a server sends.


class WireSpan(TypedDict, total=False):
    """`TimeSpan`: epoch seconds; 0.0 while not started or not ended."""

    start: float
    end: float


class WireSplit(TypedDict, total=False):
    """`TimeSplit`: a measured duration in seconds."""

    duration: float


class WireAgentSpan(WireSpan, total=False):
    """`AgentSpan`: the agent span and how its time split between model and harness."""

    model: WireSplit
    harness: WireSplit


class WireTiming(TypedDict, total=False):
    """`Timing`: when the trace started, and its spans in `PHASES` order."""

    start: float
    boot: WireSpan
    setup: WireSpan
    agent: WireAgentSpan
    finalize: WireSpan
    scoring: WireSpan


class WireError(TypedDict, total=False):
    """`Error`: a failure captured in a trace or a model call."""

    type: str
    message: str
    status_code: int | None
    traceback: str | None


class WireContentPart(TypedDict, total=False):
    """One part of a multimodal message: `{"type": "text", "text": ...}`, or an image."""

    type: str
    text: str
    image_url: dict[str, Any]


class WireToolFunction(TypedDict, total=False):
    """OpenAI's nesting of a tool call's name and arguments, read when a call has it."""

    name: str
    arguments: str


class WireToolCall(TypedDict, total=False):
    """`ToolCall`: the arguments exactly as the model emitted them (JSON, usually)."""

    id: str
    type: str
    name: str
    namespace: str | None
    arguments: str
    function: WireToolFunction


class WireMessage(TypedDict, total=False):
    """`Message`: system, user, assistant or tool (`role`), with the keys of each."""

    role: str
    content: str | list[WireContentPart] | None
    reasoning_content: str | None
    tool_calls: list[WireToolCall] | None
    provider_state: list[dict[str, Any]] | None
    tool_call_id: str
    name: str | None


class WireNode(TypedDict, total=False):
    """`MessageNode`: one message of the trace's graph, the tokens it adds (a long
    token array may be kept `Packed`) and its parent (None: a root)."""

    parent: int | None
    tools: list[dict[str, Any]]
    semantic_parents: list[dict[str, Any]]
    message: WireMessage
    sampled: bool
    timestamp: float
    token_ids: list[int] | Packed
    mask: list[bool] | Packed
    logprobs: list[float] | Packed


class WireUsage(TypedDict, total=False):
    """`Usage`: the provider's token accounting for one model call."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class WireModelCall(TypedDict, total=False):
    """`ModelCall`: one request to the model; `node` is the node it sampled, None
    for a call that failed (its `error` says why)."""

    node: int | None
    model: str | None
    sampling: dict[str, Any] | None
    endpoint: str | None
    finish_reason: str | None
    usage: WireUsage | None
    time: WireSpan
    error: WireError | None


class WireReward(TypedDict, total=False):
    """`Reward`: a named score and its weight (a scorer may add keys of its own)."""

    score: float
    weight: float


class WireTrace(TypedDict, total=False):
    """`Trace` as deltas assemble it (`EpisodeAssembly`), with the client's `pending`:
    the messages sent to the model that no node holds yet. `nodes` and `calls` are
    sequences (kept packed, decoded on access), not lists."""

    version: int
    id: str
    verifiers: dict[str, Any]
    task: dict[str, Any]
    agent: dict[str, Any]
    tools: list[dict[str, Any]]
    nodes: Sequence[WireNode]
    calls: Sequence[WireModelCall]
    errors: list[WireError]
    rewards: dict[str, WireReward | None]
    metrics: dict[str, float | None]
    info: dict[str, Any]
    root_reply: str | None
    is_completed: bool
    ok: bool
    stop_condition: str | None
    is_timeout: bool
    timing: WireTiming
    num_input_tokens: int
    num_output_tokens: int
    num_total_tokens: int
    pending: list[WireMessage]


class WireDelta(TypedDict, total=False):
    """One incremental update to one trace (verifiers' `DeltaStreamer.diff`): sent
    with its header (`open`) when the trace first appears, then the items each list
    grew by (`LIST_FIELDS`), new links of nodes already sent, the scalars whose value
    changed (`set`), the pending preview, or the trace dropped (`discard`). As decoded
    it is unchecked: the assembly checks it (`delta_checks`) before anything keeps it."""

    trace: Required[str]
    discard: bool
    open: dict[str, Any]
    links: dict[int, list[dict[str, Any]]]
    routing_repairs: dict[int, Any]
    set: dict[str, Any]
    pending: list[WireMessage]
    nodes: list[WireNode]
    calls: list[WireModelCall]
    errors: list[WireError]
    extra_usage: list[dict[str, Any]]
    request_rewrites: list[dict[str, Any]]
    response_rewrites: list[dict[str, Any]]


def packable(value: Any) -> Any:
    """msgpack's `default`: a packed span packs as the list it holds, and so do a
    trace's packed nodes and calls (`PackedList`, a sequence)."""
    if isinstance(value, Packed):
        return value.decode()
    if isinstance(value, Sequence):
        return list(value)
    raise TypeError(f"cannot pack {type(value).__name__}")


def plain(value: Any) -> Any:
    """`value` with every packed span and packed node list decoded: for code that
    needs real lists (a JSON export, a pydantic model)."""
    if isinstance(value, Packed):
        return value.decode()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list) or (isinstance(value, Sequence) and not isinstance(value, (str, bytes, tuple))):
        return [plain(item) for item in value]
    return value


def unpack_delta(data: bytes) -> Any:
    """A delta frame decoded as `unpack` does, except that its nodes' token arrays stay
    packed (`Packed`): their numbers never become Python objects, and its nodes and
    calls come with the bytes each was sent as (`KeptItems`). A frame the fast path
    cannot read is decoded by `unpack`, which says what is wrong with it."""
    spans = _has_long_token_array(data)
    if not spans and not _has_kept_items(data):
        return unpack(data)
    try:
        return _unpack_keeping_spans(data, spans)
    except Exception:  # noqa: BLE001 - unpack decides, and names the problem
        return unpack(data)


def unpack_record(data: bytes) -> Any:
    """A map holding a delta under `d` (a recording's record) decoded as `unpack` does,
    except that the delta is decoded as `unpack_delta` decodes it: what was read from
    a file is kept as its bytes, never packed again."""
    spans = _has_long_token_array(data)
    if not spans and not _has_kept_items(data):
        return unpack(data)
    try:
        unpacker = _unpacker(data)
        record = {}
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            record[key] = _delta(unpacker, data, spans) if key == "d" else unpacker.unpack()
        _ended(unpacker, data)
        return record
    except Exception:  # noqa: BLE001 - unpack decides, and names the problem
        return unpack(data)


class KeptItems(list[Any]):
    """A delta's `nodes` or `calls` as decoded, each item's msgpack bytes beside it in
    `raw`: the assembly keeps an item as the bytes it came in as instead of packing
    again what was just decoded. It is the plain list to every reader; a decoded
    delta is read, never changed, so the bytes stay true to the items."""

    __slots__ = ("raw",)

    def __init__(self, items: list[Any], raw: list[bytes]) -> None:
        super().__init__(items)
        self.raw = raw


_KEPT_KEYS = (msgpack.packb("nodes"), msgpack.packb("calls"))


def _has_kept_items(data: bytes) -> bool:
    """Whether a frame may carry nodes or calls (their key's bytes): any other frame
    (a preview, scalars: most of a stream) is read whole, at C speed."""
    return _KEPT_KEYS[0] in data or _KEPT_KEYS[1] in data


def _unpacker(data: bytes) -> msgpack.Unpacker:
    unpacker = msgpack.Unpacker(max_buffer_size=max(1, len(data)), **UNPACK_OPTIONS)
    unpacker.feed(data)
    return unpacker


def _ended(unpacker: msgpack.Unpacker, data: bytes) -> None:
    if unpacker.tell() != len(data):
        raise ValueError("extra data after the map")


def _unpack_keeping_spans(data: bytes, spans: bool) -> dict[Any, Any]:
    unpacker = _unpacker(data)
    delta = _delta(unpacker, data, spans)
    _ended(unpacker, data)
    return delta


def _delta(unpacker: msgpack.Unpacker, data: bytes, spans: bool) -> dict[Any, Any]:
    """The delta map at the unpacker's position; `spans`: the frame holds long token
    arrays, read as `Packed` views of it."""
    delta = {}
    for _ in range(unpacker.read_map_header()):
        key = unpacker.unpack()
        if key == "nodes":
            delta[key] = _kept(unpacker, data, memoryview(data) if spans else None)
        elif key == "calls":
            delta[key] = _kept(unpacker, data, None)
        else:
            delta[key] = unpacker.unpack()
    return delta


def _kept(unpacker: msgpack.Unpacker, data: bytes, view: memoryview | None) -> KeptItems:
    """The array at the unpacker's position, each item with a copy of its bytes: read
    as a node keeping its long token arrays as views of the frame (`view`, read once),
    else decoded whole from those bytes at C speed."""
    items, raw = [], []
    for _ in range(unpacker.read_array_header()):
        start = unpacker.tell()
        if view is None:
            unpacker.skip()
            item = data[start : unpacker.tell()]
            items.append(unpack(item))
        else:
            items.append(_node(unpacker, data, view))
            item = data[start : unpacker.tell()]
        raw.append(item)
    return KeptItems(items, raw)


def _node(unpacker: msgpack.Unpacker, data: bytes, view: memoryview) -> dict[Any, Any]:
    """A token field that is not an array (most are nil) is read in place: only an
    array's length decides whether it stays packed."""
    node = {}
    for _ in range(unpacker.read_map_header()):
        key = unpacker.unpack()
        if key in PACKED_FIELDS and data[start := unpacker.tell()] in _ARRAY_MARKERS:
            unpacker.skip()
            end = unpacker.tell()
            node[key] = Packed(view[start:end]) if end - start >= PACKED_MIN_BYTES else unpack(data[start:end])
        else:
            node[key] = unpacker.unpack()
    return node


def unpack_node(data: bytes) -> Any:
    """One node's msgpack map decoded as `unpack_delta` decodes a delta's nodes: its
    long token arrays stay packed (any other item is decoded as `unpack` does)."""
    if data[0] not in _MAP_MARKERS or not _has_long_token_array(data):
        return unpack(data)
    return _node(_unpacker(data), data, memoryview(data))


class WireModel(BaseModel):
    # Fields a newer server adds must survive a round trip through us.
    model_config = ConfigDict(extra="allow")


class TimeoutConfig(WireModel):
    connect: float | None = 30.0
    read: float | None = None
    write: float | None = None
    pool: float | None = None


class ClientConfig(WireModel):
    """The model endpoint a rollout calls. The key travels as the *name* of an
    environment variable that the server reads; it never crosses the wire."""

    base_url: str = "http://127.0.0.1:8000/v1"
    api_key_var: str = "OPENAI_API_KEY"
    headers: dict[str, str] = Field(default_factory=dict)
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    timeout: TimeoutConfig = Field(default_factory=TimeoutConfig)
    type: Literal["eval", "train"] = "eval"


class SamplingConfig(WireModel):
    temperature: float | None = None
    top_p: float | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = None


class Request(BaseModel):
    method: ClassVar[str]


class HealthRequest(Request):
    method: ClassVar[str] = "health"


class RunRequest(Request):
    method: ClassVar[str] = "run"
    task_data: dict[str, Any]
    client: ClientConfig
    model: str
    sampling: SamplingConfig


class CancelRequest(Request):
    method: ClassVar[str] = "cancel"
    request_id: str


class Response(WireModel):
    success: bool = True
    error: str | None = None


class HealthResponse(Response):
    pass


class CancelResponse(Response):
    cancelled: bool = False
    """Whether a live run was found and aborted; an unknown id is not an error."""


class TraceSummary(WireModel):
    """A finished trace's size, which the assembly of its deltas must match."""

    id: str
    nodes: int
    calls: int


class RunResponse(Response):
    head: dict[str, Any] | None = None
    """The episode without its traces (they streamed as deltas)."""
    traces: list[TraceSummary] = Field(default_factory=list)


def request_payload(request: Request) -> bytes:
    return pack(request.model_dump(mode="json"))


class MalformedReply(TracewatchError, RuntimeError):
    """A reply that is not the shape verifiers' protocol gives it: the request it
    answers fails with this, never with a validation traceback."""


R = TypeVar("R", bound=Response)


def parse_reply(model: type[R], reply: Any, method: str) -> R:
    """`reply` to a `method` request as `model`, or `MalformedReply` naming what was
    wrong (at most three fields, each value cut short)."""
    try:
        return model.model_validate(reply)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, item['loc'])) or 'the reply'}: {item['msg'].lower()} (got {short_repr(item.get('input'), 40)})"
            for item in error.errors()[:3]
        )
        raise MalformedReply(f"the server's {method} reply is malformed: {problems}") from None


def delta_failure(request_id: str, error: BaseException) -> str:
    """Why a run failed on a delta that could not be applied: the same words live and
    in a replay of the same recording."""
    return f"request {request_id}: a delta could not be applied: {error}"
