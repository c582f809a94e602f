"""One message's tokens with every per-token stream placed on them.

verifiers 0.4.0's `MessageNode` carries `token_ids` with `mask` (trained, sampled
tokens) and `is_content` parallel to them; `logprobs`, `advantages`,
`reference_logprobs`, `trainer_logprobs` and `entropies` in the compact layout, one
value per True in `mask`, in order; and `loss_weights`, named streams parallel to
`token_ids`. Here each stream is placed on the tokens once, as numpy arrays (a
32k-token message is a few arrays, not a million Python objects).

Whatever a node holds, reading it never raises: a stream whose length disagrees with
what it must align to is not placed at all (which token a value belongs to is then
unknown, and a shifted stream reads as plausible nonsense) and the message carries a
finding that says so; values of the wrong type read as missing, NaN and infinities are
kept and counted, and each is a finding too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tracewatch.core.text import short_repr
from tracewatch.core.tokens.flags import COMPACT_STREAMS, TOOL_TRAINED, node_flags, role
from tracewatch.core.wire.protocol import Packed

Floats = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]
Ids = npt.NDArray[np.int64]

TRAINER_MASK = "is_masked"
"""prime-rl's trainer's own mask over a node's trained tokens (null where unknown):
placed as the compact streams are, read as flags (`_maybe_flags`)."""
NO_ID = -1
"""Stands in for a token id that is not an integer a tokenizer could know."""
_INT64 = np.iinfo(np.int64)


@dataclass(frozen=True)
class MessageTokens:
    """A message's tokens; every array has one entry per token. A compact stream is
    NaN on the tokens it has no value for (scaffold, inputs); a stream that is absent
    or could not be placed is not in `compact` (nor in `loss_weights`)."""

    ids: Ids
    mask: Flags
    is_content: Flags | None
    compact: dict[str, Floats] = field(default_factory=dict)
    loss_weights: dict[str, Floats] = field(default_factory=dict)
    findings: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def trained(self) -> int:
        return int(self.mask.sum())


def read_message(node: Any) -> MessageTokens:
    """`node` (a node dict as the store gives it: long arrays still `Packed`) as
    tokens with its streams placed; never raises, whatever the node holds."""
    findings: list[str] = []
    if not isinstance(node, Mapping):
        findings.append(f"the node is a {type(node).__name__}, not a map")
        node = {}
    ids = _ids(_items(node, "token_ids", findings), findings)
    count = len(ids)
    mask, mask_fits = _flags("mask", _items(node, "mask", findings), count, findings)
    content_items = _items(node, "is_content", findings)
    content, content_fits = _flags("is_content", content_items, count, findings)
    attributed = content_items is not None and len(content_items) > 0
    compact: dict[str, Floats] = {}
    trained = int(mask.sum())
    if TOOL_TRAINED in node_flags(node):
        findings.insert(0, f"{_unsampled(node)} is trained: {trained:,} tokens the model did not sample are in the loss")
    for name in (*COMPACT_STREAMS, TRAINER_MASK):
        values = _items(node, name, findings)
        if values is None:
            continue
        floats = _floats(name, values, findings) if name != TRAINER_MASK else _maybe_flags(values)
        if not mask_fits:
            findings.append(f"{name} not placed: the mask does not fit the tokens")
        elif len(floats) != trained:
            findings.append(f"{name} has {len(floats)} values for {trained} trained tokens: not placed")
        elif trained or count:
            placed = np.full(count, np.nan)
            placed[mask] = floats
            compact[name] = placed
    return MessageTokens(
        ids=ids,
        mask=mask,
        is_content=content if attributed and content_fits else None,
        compact=compact,
        loss_weights=_loss_weights(node.get("loss_weights"), count, findings),
        findings=tuple(findings),
    )


UNSAMPLED = {"tool": "a tool result", "user": "a user turn", "system": "a system message", "assistant": "an assistant message the model did not sample"}


def _unsampled(node: Mapping[Any, Any]) -> str:
    """What a trained node the model did not sample is, in words: the header names it
    (the mask's bug a run is watched for), not only its count of trained tokens."""
    kind = role(node)
    return UNSAMPLED.get(kind, "a message the model did not sample") if isinstance(kind, str) else "a node the model did not sample"


_FLOAT64 = 0xCB
_TRUE, _FALSE = 0xC3, 0xC2


def _array_body(raw: bytes | memoryview) -> tuple[int, int]:
    """A packed array's item count and where its items start."""
    marker = raw[0]
    if marker == 0xDC:
        return int.from_bytes(raw[1:3], "big"), 3
    if marker == 0xDD:
        return int.from_bytes(raw[1:5], "big"), 5
    return marker & 0x0F, 1


def _packed_floats(packed: Packed) -> Floats | None:
    """A packed array of float64s read straight from its bytes (each item a marker byte
    and 8 big-endian bytes), none becoming a Python object; None when it holds
    anything else."""
    count, start = _array_body(packed.raw)
    if len(packed.raw) - start != 9 * count:
        return None
    items = np.frombuffer(packed.raw, dtype=np.dtype([("marker", "u1"), ("value", ">f8")]), count=count, offset=start)
    if not (items["marker"] == _FLOAT64).all():
        return None
    return items["value"].astype(np.float64)


def _packed_flags(packed: Packed) -> Flags | None:
    """A packed array of booleans (one byte each) read straight from its bytes."""
    count, start = _array_body(packed.raw)
    if len(packed.raw) - start != count:
        return None
    items = np.frombuffer(packed.raw, dtype=np.uint8, count=count, offset=start)
    if not ((items == _TRUE) | (items == _FALSE)).all():
        return None
    flags: Flags = items == _TRUE
    return flags


Items = list[Any] | npt.NDArray[Any]
"""A stream's items: decoded, or read straight from packed bytes into an array."""


def _items(node: Mapping[Any, Any], name: str, findings: list[str]) -> Items | None:
    """A stream's items; None when it is absent (None or missing) or not a list."""
    return _listed(node.get(name), name, findings)


def _listed(value: Any, name: str, findings: list[str]) -> Items | None:
    if value is None:
        return None
    if isinstance(value, Packed):
        direct: npt.NDArray[Any] | None = _packed_flags(value)
        if direct is None:
            direct = _packed_floats(value)
        return value.decode() if direct is None else direct
    if isinstance(value, list | tuple):
        return list(value)
    findings.append(f"{name} is {short_repr(value, 30)}, not a list: ignored")
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _converted(items: Items, kinds: str) -> npt.NDArray[Any] | None:
    """`items` as a 1-d array when they are all plain numbers (or all bools) that numpy
    reads as `kinds`: the fast path. None sends the caller to the item-by-item one, as
    does a bool among numbers, which numpy would quietly read as 0 or 1."""
    if isinstance(items, np.ndarray):
        return items if items.dtype.kind in kinds else None
    types = set(map(type, items))
    if not (types <= {int, float} or types == {bool}):
        return None
    try:
        array = np.asarray(items)
    except (ValueError, TypeError, OverflowError):
        return None
    if array.ndim == 1 and array.dtype.kind in kinds:
        return array
    return None


def _ids(items: Items | None, findings: list[str]) -> Ids:
    if items is None or not len(items):
        return np.zeros(0, np.int64)
    array = _converted(items, "iu")
    if array is not None and (array.dtype.kind == "i" or int(array.max()) <= _INT64.max):
        return array.astype(np.int64)
    ids = np.full(len(items), NO_ID, np.int64)
    bad = 0
    for index, item in enumerate(items):
        if isinstance(item, int) and not isinstance(item, bool) and _INT64.min <= item <= _INT64.max:
            ids[index] = item
        else:
            bad += 1
    if bad:
        findings.append(f"token_ids: {bad} of {len(items)} are not token ids (shown as {NO_ID})")
    return ids


def _flags(name: str, items: Items | None, count: int, findings: list[str]) -> tuple[Flags, bool]:
    """The flags over the `count` tokens (False where there is none) and whether the
    stream fits them; an empty `is_content` is "not attributed", not a misfit."""
    flags = np.zeros(count, np.bool_)
    if items is None or (not len(items) and name == "is_content"):
        return flags, True
    array = _converted(items, "biu")
    if array is not None and (array.dtype.kind == "b" or bool(np.isin(array, (0, 1)).all())):
        given = array.astype(np.bool_)
    else:
        given = np.array([item is True or (_number(item) and item == 1) for item in items], np.bool_)
        bad = sum(1 for item in items if not (isinstance(item, bool) or (_number(item) and item in (0, 1))))
        if bad:
            findings.append(f"{name}: {bad} of {len(items)} are not true or false (read as false)")
    fits = len(given) == count
    if not fits:
        findings.append(f"{name} has {len(given)} flags for {count} tokens")
    shared = min(count, len(given))
    flags[:shared] = given[:shared]
    return flags, fits


def _maybe_flags(items: Items) -> Floats:
    """prime-rl's trainer mask: 1 where the trainer masked the token out of its loss, 0
    where it did not, NaN where it does not say (null, or anything but a bool)."""
    return np.fromiter((1.0 if item is True else 0.0 if item is False else np.nan for item in items), dtype=np.float64, count=len(items))


def _floats(name: str, items: Items, findings: list[str]) -> Floats:
    array = _converted(items, "fiu")
    bad = 0
    if array is not None:
        try:
            floats = array.astype(np.float64)
        except OverflowError:
            array = None
    if array is None:
        floats = np.full(len(items), np.nan)
        for index, item in enumerate(items):
            try:
                floats[index] = float(item) if _number(item) else np.nan
                bad += not _number(item)
            except OverflowError:
                bad += 1
        if bad:
            findings.append(f"{name}: {bad} of {len(items)} values are not numbers (shown as missing)")
    odd = int((~np.isfinite(floats)).sum()) - bad
    if odd:
        findings.append(f"{name}: {odd} of {len(items)} values are NaN or infinite")
    return floats


def _loss_weights(value: Any, count: int, findings: list[str]) -> dict[str, Floats]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        findings.append(f"loss_weights is {short_repr(value, 30)}, not named streams: ignored")
        return {}
    streams: dict[str, Floats] = {}
    for key, weights in value.items():
        name = key if isinstance(key, str) else repr(key)
        items = _listed(weights, f"loss_weights[{name}]", findings)
        if items is None:
            continue
        floats = _floats(f"loss_weights[{name}]", items, findings)
        if len(floats) != count:
            findings.append(f"loss_weights[{name}] has {len(floats)} values for {count} tokens: not placed")
        else:
            streams[name] = floats
    return streams


@dataclass(frozen=True)
class Stream:
    """One way to colour a message's tokens: its values per token (None when the
    message does not carry what it is computed from), how to read them (`scale`:
    flags, sequential, or diverging around 0), and what a user calls it."""

    key: str
    label: str
    scale: str
    values: Callable[[MessageTokens], Floats | None]


def _compact(name: str) -> Callable[[MessageTokens], Floats | None]:
    return lambda tokens: tokens.compact.get(name)


def _difference(minuend: str, subtrahend: str) -> Callable[[MessageTokens], Floats | None]:
    def values(tokens: MessageTokens) -> Floats | None:
        first, second = tokens.compact.get(minuend), tokens.compact.get(subtrahend)
        if first is None or second is None:
            return None
        with np.errstate(all="ignore"):  # inf - inf is NaN: a finding already counts it
            return first - second

    return values


def _probability(tokens: MessageTokens) -> Floats | None:
    logprobs = tokens.compact.get("logprobs")
    if logprobs is None:
        return None
    with np.errstate(all="ignore"):  # a hostile logprob of 1e308 is inf, not a warning
        return np.exp(logprobs)


def _is_content(tokens: MessageTokens) -> Floats | None:
    return None if tokens.is_content is None else tokens.is_content.astype(np.float64)


STREAMS: tuple[Stream, ...] = (
    Stream("logprob", "logprob", "sequential", _compact("logprobs")),
    Stream("probability", "probability", "sequential", _probability),
    Stream("mask", "trained (mask)", "flags", lambda tokens: tokens.mask.astype(np.float64)),
    Stream("is_content", "content (is_content)", "flags", _is_content),
    Stream("advantage", "advantage", "diverging", _compact("advantages")),
    Stream("entropy", "entropy", "sequential", _compact("entropies")),
    Stream("mismatch", "trainer - sampler logprob", "diverging", _difference("trainer_logprobs", "logprobs")),
    Stream("kl", "sampler - reference logprob (KL)", "diverging", _difference("logprobs", "reference_logprobs")),
)
"""The colourings every message offers, then one per `loss_weights` stream
(`streams_of`). The KL stream is the per-token estimate log p - log p_ref."""


TRAINER_MASK_STREAM = Stream(TRAINER_MASK, "masked by the trainer (is_masked)", "flags", _compact(TRAINER_MASK))
"""Offered only on a message that carries prime-rl's trainer mask."""


def streams_of(tokens: MessageTokens) -> tuple[Stream, ...]:
    """`STREAMS`, the trainer's mask where the message has one, and this message's own
    loss-weight streams."""
    trainer = (TRAINER_MASK_STREAM,) if TRAINER_MASK in tokens.compact else ()
    weights = tuple(Stream(f"loss:{name}", f"loss weight {name}", "diverging", _weights(name)) for name in tokens.loss_weights)
    return STREAMS + trainer + weights


def _weights(name: str) -> Callable[[MessageTokens], Floats | None]:
    return lambda tokens: tokens.loss_weights.get(name)


def token_values(tokens: MessageTokens, index: int) -> dict[str, Any]:
    """Every stream's value at one token, by the names the node uses: what the token
    view shows under its cursor and the command line prints (None: no value there)."""
    row: dict[str, Any] = {"index": index, "id": int(tokens.ids[index]), "mask": bool(tokens.mask[index])}
    row["is_content"] = None if tokens.is_content is None else bool(tokens.is_content[index])
    for name in COMPACT_STREAMS:
        stream = tokens.compact.get(name)
        row[name] = None if stream is None or np.isnan(stream[index]) and not tokens.mask[index] else float(stream[index])
    trainer, sampler = row["trainer_logprobs"], row["logprobs"]
    with np.errstate(all="ignore"):  # inf - inf is NaN, as the mismatch stream has it
        row["mismatch"] = None if trainer is None or sampler is None else float(np.float64(trainer) - np.float64(sampler))
    masked = tokens.compact.get(TRAINER_MASK)
    row[TRAINER_MASK] = None if masked is None or np.isnan(masked[index]) else bool(masked[index])
    for name, weights in tokens.loss_weights.items():
        row[f"loss_weights[{name}]"] = float(weights[index])
    return row
