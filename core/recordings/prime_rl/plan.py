"""`plan.json`, the eval plan, and how far each planned eval epoch has come.

prime-rl writes `{env: {str(step): expected episodes}}` (atomically, merged across
relaunches) when an eval epoch is triggered for an env at a step. Progress per
(env, eval step) is what the reader knows: the planned count; the finished eval
episodes of that env whose step is known to be that step (from a live dispatch seen, an
annotation's ship step, or the record); the live traces and placeholders dispatched for
it; and the finished eval episodes of the env whose step is not known yet. prime-rl's
own dashboard ignores steps and sums the whole plan; epochs cancelled or superseded
stop short of 100%.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tracewatch.core.recordings.prime_rl.files import NotReadable, read_small

MAX_PLAN = 16 << 20


@dataclass(frozen=True)
class EvalProgress:
    env: str
    step: int
    expected: int
    done: int
    """Finished eval episodes of the env known to be of this step."""
    in_flight: int
    """Live traces and placeholders dispatched for it."""
    unknown_step: int
    """Finished eval episodes of the env whose step is not known yet (some may be this one's)."""

    @property
    def fraction(self) -> float | None:
        return None if self.expected <= 0 else min(1.0, self.done / self.expected)


@dataclass
class EvalPlan:
    """`plan.json` as last read: expected episodes per env and eval step."""

    path: Path | None
    expected: dict[str, dict[int, int]] = field(default_factory=dict)
    problem: str | None = None
    """Why the file as it stands cannot be read (the last good plan is kept)."""
    _seen: tuple[int, int, int] | None = None

    def refresh(self) -> bool:
        """Read the file again if it changed; whether the plan changed."""
        if self.path is None:
            return False
        try:
            info = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            changed, self.expected, self._seen = bool(self.expected), {}, None
            return changed
        except OSError as error:
            self.problem = f"{self.path} cannot be read ({error.strerror or error})"
            return False
        seen = (info.st_ino, info.st_size, info.st_mtime_ns)
        if seen == self._seen:
            return False
        self._seen = seen
        try:
            plan = parse_plan(read_small(self.path, MAX_PLAN))
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as error:
            self.problem = str(error) if isinstance(error, (NotReadable, ValueError)) else f"{self.path} cannot be read ({error})"
            return False
        self.problem = None
        changed, self.expected = plan != self.expected, plan
        return changed


def parse_plan(data: bytes) -> dict[str, dict[int, int]]:
    """The plan's entries whose env is text, step an integer's text and count an integer;
    ValueError if it is not a JSON object."""
    try:
        value: Any = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise ValueError(f"plan.json is not JSON ({error})") from None
    if type(value) is not dict:
        raise ValueError("plan.json is not a map of env to steps")
    plan: dict[str, dict[int, int]] = {}
    for env, steps in value.items():
        if type(steps) is not dict:
            continue
        for step, expected in steps.items():
            if type(step) is str and step.lstrip("-").isdigit() and len(step) < 19 and type(expected) is int:
                plan.setdefault(env, {})[int(step)] = expected
    return plan
