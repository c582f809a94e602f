"""The demo's tasks: what a `task_data` may ask for, and the default list.

A task_data is a verifiers `TaskData` dump (id, name, prompt, system_prompt, ...) plus
the demo's own fields, which verifiers' wire form keeps as extras:
`scenario` (see `SCENARIOS`), `kind` (coding, math, search), `variant` (which problem
of that kind), and for `scale` the `turns` and `tokens` per node.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tracewatch.core.demo.content import PROBLEMS, Problem
from tracewatch.core.errors import TracewatchError

SCENARIOS = ("normal", "slow", "failing", "transient", "stuck", "retried", "multi-agent", "training", "scale")

TASK_TYPE = "DemoTask"

TASK_DATA_DEFAULTS: dict[str, Any] = {
    "idx": None,
    "id": None,
    "name": None,
    "description": None,
    "prompt": None,
    "system_prompt": None,
    "image": None,
    "workdir": None,
    "agent_user": None,
    "skills": [],
    "network_allow": ["*"],
    "network_block": [],
    "artifacts": [],
    "artifact_max_bytes": 33554432,
    "timeout": {"setup": None, "agent": None, "finalize": None, "scoring": None},
    "resources": {"cpu": None, "memory": None, "gpu": None, "disk": None},
}
"""What verifiers' `TaskData` fills in, so the recorded task reads as a served one."""

MAX_TURNS = 100_000
MAX_TOKENS = 1_000_000


class TaskDataError(TracewatchError, ValueError):
    """A task_data the demo cannot play; the run replies failed with this text."""


@dataclass(frozen=True)
class DemoTask:
    data: dict[str, Any]
    scenario: str
    problem: Problem
    turns: int
    tokens: int

    @property
    def key(self) -> str:
        """What per-run randomness is derived from, with the seed: the task, never
        the order runs arrive in."""
        return str(self.data.get("id") or self.record["hash"])

    @property
    def prompt(self) -> str:
        return self.data.get("prompt") or self.problem.prompt

    @property
    def system_prompt(self) -> str:
        return self.data.get("system_prompt") or self.problem.system_prompt

    @property
    def record(self) -> dict[str, Any]:
        """The trace's `task`: type, full data, and verifiers' content hash as key."""
        digest = hashlib.sha256(json.dumps(_drop_none(self.data), sort_keys=True).encode()).hexdigest()
        return {"type": TASK_TYPE, "data": self.data, "key": digest, "hash": digest}


def parse(task_data: Any) -> DemoTask:
    if not isinstance(task_data, dict):
        raise TaskDataError(f"task_data must be a map, got {type(task_data).__name__}")
    scenario = task_data.get("scenario", "normal")
    if scenario not in SCENARIOS:
        raise TaskDataError(f"unknown scenario {scenario!r}; the demo plays {', '.join(SCENARIOS)}")
    kind = task_data.get("kind", "coding")
    if kind not in PROBLEMS:
        raise TaskDataError(f"unknown kind {kind!r}; the demo has {', '.join(PROBLEMS)}")
    turns = _bounded(task_data, "turns", 50, MAX_TURNS)
    tokens = _bounded(task_data, "tokens", 1000, MAX_TOKENS)
    variant = _bounded(task_data, "variant", 0, 1 << 30)
    problems = PROBLEMS[kind]
    return DemoTask(
        data={**TASK_DATA_DEFAULTS, **task_data},
        scenario=scenario,
        problem=problems[variant % len(problems)],
        turns=turns,
        tokens=tokens,
    )


def _bounded(task_data: dict[str, Any], field: str, default: int, most: int) -> int:
    value = task_data.get(field, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
        raise TaskDataError(f"{field} must be an integer from 0 to {most}, got {value!r}")
    return value


def _drop_none(value: Any) -> Any:
    # verifiers hashes `model_dump(exclude_none=True)`
    if isinstance(value, dict):
        return {key: _drop_none(item) for key, item in value.items() if item is not None}
    return value


def _task(idx: int, scenario: str, kind: str, variant: int = 0) -> dict[str, Any]:
    problem = PROBLEMS[kind][variant % len(PROBLEMS[kind])]
    return {
        "idx": idx,
        "id": f"demo-{idx}-{scenario}",
        "name": f"{scenario}: {problem.name}",
        "prompt": problem.prompt,
        "system_prompt": problem.system_prompt,
        "scenario": scenario,
        "kind": kind,
        "variant": variant,
    }


DEFAULT_TASKS: list[dict[str, Any]] = [
    _task(0, "normal", "coding"),
    _task(1, "normal", "math", 0),
    _task(2, "normal", "search"),
    _task(3, "slow", "search"),
    _task(4, "failing", "coding"),
    _task(5, "transient", "math", 1),
    _task(6, "stuck", "coding"),
    _task(7, "retried", "coding"),
    _task(8, "multi-agent", "math", 1),
    _task(9, "training", "coding"),
]
"""One task per scenario the demo shows a human (scale is for load, not listed)."""
