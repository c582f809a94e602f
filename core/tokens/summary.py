"""One message's tokens summed up: what the token view's header and the command line
say about it before any single token."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracewatch.core.tokens.streams import Flags, Floats, MessageTokens


@dataclass(frozen=True)
class Extreme:
    value: float
    index: int
    """The token it is at."""


@dataclass(frozen=True)
class Summary:
    tokens: int
    trained: int
    content: int | None
    """None when the renderer did not attribute content."""
    mean_logprob: float | None
    lowest_logprob: Extreme | None
    worst_mismatch: Extreme | None
    """The trainer's logprob minus the sampler's, where it is furthest from 0."""
    findings: tuple[str, ...]


def summarize(tokens: MessageTokens) -> Summary:
    """Means and extremes over the finite values only: a NaN is counted among the
    findings, not allowed to make every figure NaN."""
    logprobs = tokens.compact.get("logprobs")
    trainer = tokens.compact.get("trainer_logprobs")
    mean = lowest = mismatch = None
    if logprobs is not None:
        finite = np.isfinite(logprobs)
        if finite.any():
            mean = _mean(logprobs[finite])
            lowest = _extreme(logprobs, finite, np.argmin)
    if logprobs is not None and trainer is not None:
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is NaN, 1e308 - -1e308 inf, both left out below: no warning on stderr
            difference = trainer - logprobs
        mismatch = _extreme(difference, np.isfinite(difference), lambda values: np.argmax(np.abs(values)))
    return Summary(
        tokens=len(tokens),
        trained=tokens.trained,
        content=None if tokens.is_content is None else int(tokens.is_content.sum()),
        mean_logprob=mean,
        lowest_logprob=lowest,
        worst_mismatch=mismatch,
        findings=tokens.findings,
    )


def _extreme(values: Floats, finite: Flags, pick: Callable[[Floats], Any]) -> Extreme | None:
    if not finite.any():
        return None
    where = np.flatnonzero(finite)
    at = int(where[pick(values[where])])
    return Extreme(float(values[at]), at)


def _mean(values: np.ndarray) -> float:
    """The mean of finite values, finite whatever their size: the sum of 1e308s
    overflows, so then they are scaled by the largest first."""
    with np.errstate(over="ignore"):
        mean = float(values.mean())
    if math.isfinite(mean):
        return mean
    largest = float(np.abs(values).max())
    return float((values / largest).mean()) * largest
