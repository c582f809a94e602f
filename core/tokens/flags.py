"""What is wrong with a trace's training tokens, found one node at a time as nodes land:
the two masking bugs a run is watched for across its rollouts, not one message at a time.

- `tool-trained`: the loss trains on tokens the model did not sample (a tool result, a
  user turn, an unsampled node): `mask` True on a node that is not a sampled assistant one.
- `misaligned`: a compact stream (`logprobs`, `advantages`, ...) has a length other than
  the number of True in `mask`, or `mask` another length than `token_ids`: the token view
  cannot place its values on tokens (`streams.read_message` says the same, per message).

No numpy and no decoding of a packed float array: a mask packed as one byte per flag is
counted in its bytes, and a stream's length is read from its header, so a 32k-token
node costs a few byte counts. A stream that is not a list is ignored, as the token view
ignores it; a flag is True or the number 1, as the token view reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracewatch.core.wire.protocol import Packed

TOOL_TRAINED = "tool-trained"
MISALIGNED = "misaligned"
FLAGS = (TOOL_TRAINED, MISALIGNED)
NO_FLAGS: frozenset[str] = frozenset()

COMPACT_STREAMS = ("logprobs", "advantages", "reference_logprobs", "trainer_logprobs", "entropies")
"""Streams over the sampled tokens only: one value per True in `mask`."""

_TRAINED_BYTES = (b"\xc3", b"\x01")
"""A packed True and a packed 1: the one-byte items that read as trained."""


def node_flags(node: Any) -> frozenset[str]:
    """The flags one node raises (a node dict as the store or a recording gives it;
    long arrays may still be `Packed`); never raises. Every node that lands passes
    here, so each test is the cheapest that decides (exact types first)."""
    if type(node) is not dict and not isinstance(node, Mapping):
        return NO_FLAGS
    get = node.get
    mask = get("mask")
    shape = None if mask is None else _shape(mask)
    tool_trained = misaligned = False
    trained = 0
    if shape is not None:
        flag_count, trained = shape
        tool_trained = trained > 0 and not (get("sampled") and role(node) == "assistant")
        misaligned = flag_count != (_length(get("token_ids")) or 0)
    if not misaligned:
        for name in COMPACT_STREAMS:
            value = get(name)
            if value is not None and (length := _length(value)) is not None and length != trained:
                misaligned = True
                break
    return _FLAG_SETS[tool_trained, misaligned]


_FLAG_SETS = {
    (False, False): NO_FLAGS,
    (True, False): frozenset({TOOL_TRAINED}),
    (False, True): frozenset({MISALIGNED}),
    (True, True): frozenset(FLAGS),
}


def role(node: Mapping[Any, Any]) -> Any:
    """The node's message's role; None (or whatever it holds) when it has none."""
    message = node.get("message")
    return message.get("role") if isinstance(message, Mapping) else None


def _length(value: Any) -> int | None:
    """A stream's length, None when it is absent or not a list."""
    kind = type(value)
    if kind is Packed or kind is list or kind is tuple or isinstance(value, Packed | list | tuple):
        return len(value)
    return None


def _shape(mask: Any) -> tuple[int, int] | None:
    """The mask's flags and how many are trained; None when there is no mask list."""
    if isinstance(mask, Packed):
        count = len(mask)
        raw = bytes(mask.raw)
        body = raw[_header(raw[0]) :]
        if len(body) == count:  # one byte an item: count the trained ones
            return count, body.count(_TRAINED_BYTES[0]) + body.count(_TRAINED_BYTES[1])
        mask = mask.decode()
    if not isinstance(mask, list | tuple):
        return None
    return len(mask), mask.count(True)  # True, 1 and 1.0: what the token view reads as trained


def _header(marker: int) -> int:
    return 3 if marker == 0xDC else 5 if marker == 0xDD else 1
