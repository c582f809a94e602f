"""The env-serve wire of verifiers 0.4.0 (`verifiers/v1/serve/`), spoken byte for byte.

A client DEALER sends `[request_id, method, msgpack(payload)]`; the server ROUTER
answers `[request_id, kind, msgpack(data)]` where `kind` is `delta` (zero or more per
run) or `reply` (exactly one). The models here are ours, shaped like verifiers' so
that a dumped request validates on its server and its replies validate here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeVar

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.text import short_repr

KIND_DELTA = b"delta"
KIND_REPLY = b"reply"

ABORTED_ERROR = "Cancelled: rollout aborted"
"""The reply error verifiers' server sends for a run a cancel aborted."""


def pack(payload: Any) -> bytes:
    packed: bytes = msgpack.packb(payload, use_bin_type=True)
    return packed


UNPACK_OPTIONS: dict[str, Any] = {"raw": False, "strict_map_key": False}
"""How every msgpack this project reads is decoded: `links` and `routing_repairs`
are keyed by node index, so map keys may be ints."""


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, **UNPACK_OPTIONS)


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
    """A finished trace's size, which the client's assembly must match."""

    id: str
    nodes: int
    calls: int


class RunResponse(Response):
    head: dict[str, Any] | None = None
    """The episode without its traces (they streamed as deltas)."""
    traces: list[TraceSummary] = Field(default_factory=list)


def request_payload(request: Request) -> bytes:
    return pack(request.model_dump(mode="json"))


class MalformedReply(RuntimeError):
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
