"""A run request's bytes, built once per client, model and sampling and stamped with
each run's task.

Every run a variant starts sends the same endpoint, model and sampling; only the task
differs. Validating a pydantic `RunRequest` and dumping it for each of thousands of
runs started at once took the loop from the screen while they started; here those
fields are validated and packed once, and a run packs only its task, placed where the
model would put it so the bytes are the ones `request_payload` gives. A task that
pydantic's JSON dump would change (a tuple, bytes, a float that is not finite, a key
that is not a string, a nesting deeper than a task has) is dumped by pydantic as before.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
from pydantic import BaseModel

from tracewatch.core.wire.protocol import ClientConfig, RunRequest, SamplingConfig, pack, request_payload

PLAIN_DEPTH = 32
"""A task nested deeper than this is left to pydantic's dump."""


def plain_json(value: Any, depth: int = 0) -> bool:
    """True if pydantic's JSON dump of `value` is `value` itself: only dicts with str
    keys, lists, str, int, finite floats, bools and None."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if depth >= PLAIN_DEPTH:
        return False
    if kind is dict:
        return all(type(key) is str and plain_json(item, depth + 1) for key, item in value.items())
    if kind is list:
        return all(plain_json(item, depth + 1) for item in value)
    return False


def _model_fields(value: Any) -> Any:
    """How a model is told apart in a shared-fields key: its class and every field,
    extras too, as they are held."""
    if isinstance(value, BaseModel):
        return [type(value).__qualname__, value.__dict__, value.__pydantic_extra__]
    raise TypeError(f"not a key part: {type(value).__name__}")


class RunPayloads:
    """The payload of a `run` request: the fields every run shares are packed once and
    kept while the next run's pack to the same key (a variant's never change).

    The key is the fields packed as they are held, not `==`: that holds 1, 1.0 and
    True equal, 0.0 and -0.0 too, and dicts whose keys come in another order, all of
    which the dump writes apart."""

    def __init__(self) -> None:
        self._keys = msgpack.Packer(use_bin_type=True, default=_model_fields)
        self._shared: bytes | None = None
        self._head = b""
        self._tail = b""

    def payload(
        self,
        task_data: dict[str, Any],
        client: ClientConfig | dict[str, Any],
        model: str,
        sampling: SamplingConfig | dict[str, Any] | None,
    ) -> bytes:
        try:
            key: bytes | None = self._keys.pack((client, model, sampling))
        except (TypeError, ValueError, OverflowError):  # not packable as held: shared again each run
            key = None
        if key is None or key != self._shared:
            self._share(client, model, sampling)
            self._shared = key
        if type(task_data) is dict and plain_json(task_data):
            return self._head + pack(task_data) + self._tail
        return request_payload(self._request(task_data, client, model, sampling))

    def _share(self, client: Any, model: str, sampling: Any) -> None:
        self._shared = None  # a failed validation keeps no key
        fields = self._request({}, client, model, sampling).model_dump(mode="json")
        if len(fields) >= 16 or next(iter(fields)) != "task_data":  # a fixmap, the task first
            raise AssertionError(f"a run request's fields are not what the payload's layout assumes: {list(fields)}")
        self._head = bytes([0x80 | len(fields)]) + pack("task_data")
        self._tail = b"".join(pack(key) + pack(value) for key, value in fields.items() if key != "task_data")

    @staticmethod
    def _request(task_data: dict[str, Any], client: Any, model: str, sampling: Any) -> RunRequest:
        return RunRequest(
            task_data=task_data,
            client=ClientConfig.model_validate(client),
            model=model,
            sampling=SamplingConfig.model_validate(sampling or {}),
        )
