"""What an episode read from a file (a verifiers run's line, an exported episode, a
prime-rl record) must be before it is loaded: the head's values that loading and the
readers after it use, and each trace a map with an id. This is the wire's boundary
check (`tracewatch.core.wire.delta_checks`) for what a file adds around the traces: a
trace's own values go through that check itself as the trace is applied, and nothing
in the head is nested deeper than a delta may be. An episode that fails is one row
that says why; every other episode of the file loads."""

from __future__ import annotations

from typing import Any

from tracewatch.core.recordings.export import ORIGIN_KEY
from tracewatch.core.text import short_repr
from tracewatch.core.wire.delta_checks import DeltaValueError, check_nesting


def episode_problem(episode: dict[str, Any]) -> str | None:
    """What in `episode` no reader could use, or None."""
    task = episode.get("task")
    if task is not None and type(task) is not dict:
        return _wrong("task", "a map", task)
    data = task.get("data") if task else None
    if data is not None and type(data) is not dict:
        return _wrong("task.data", "a map", data)
    env = episode.get("env")
    if env is not None and type(env) is not dict:
        return _wrong("env", "a map", env)
    errors = episode.get("errors")
    if errors is not None and type(errors) is not list:
        return _wrong("errors", "a list", errors)
    origin = episode.get(ORIGIN_KEY)
    if type(origin) is dict:
        for name in ("task_index", "rollout_index"):
            number = origin.get(name)
            if number is not None and (type(number) is not int or number < 0):
                return _wrong(f"{ORIGIN_KEY}.{name}", "a whole number", number)
    for index, trace in enumerate(episode.get("traces") or ()):
        if type(trace) is not dict or type(trace.get("id")) is not str:
            return _wrong(f"traces[{index}]", "a trace (a map with a text id)", trace)
    try:
        check_nesting({key: value for key, value in episode.items() if key != "traces"}, "the episode's head")
    except DeltaValueError as error:
        return str(error)
    return None


def _wrong(where: str, expected: str, value: Any) -> str:
    return f"{where} must be {expected}, got {type(value).__name__} {short_repr(value, 40)}"
