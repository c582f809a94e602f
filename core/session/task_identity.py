"""Which task a rollout ran, as one string that is the same wherever the rollout is
read: live from a tap, from a recording, or from a verifiers run directory. Rollouts
of one task are grouped by it (their task index and `#`), and Compare matches tasks
across sources by it.

verifiers 0.4.0 gives every task a `key` (its run directory keeps it, with a `hash`);
without one, the task's data is the identity. A run directory drops a field whose
value is null (`exclude_none`) where a tap sends it as null, so nulls are left out
of the data's fingerprint.
"""

from __future__ import annotations

import json
from typing import Any


def task_identity(key: Any, data: Any) -> str:
    if isinstance(key, str) and key:
        return f"key:{key}"
    return "data:" + json.dumps(_without_nulls(data), sort_keys=True, default=repr)


def episode_task_key(task: Any) -> str | None:
    """The key a verifiers episode's `task` carries (its `key`, else its `hash`)."""
    if not isinstance(task, dict):
        return None
    key = task.get("key") or task.get("hash")
    return key if isinstance(key, str) and key else None


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
