"""Finished (or running) prime-rl training runs, read from what its file monitor writes.

prime-rl's `FileMonitor.log_episodes` (`src/prime_rl/monitors/file.py`) appends each
cohort of episodes to

    <output dir>/rollouts/step_<N>/<kind>/<subset>/traces.jsonl

where kind is `train` or `eval` and subset is `all` (every episode, appended as it
arrives, before the trainer's credit is assigned) or `effective` (the episodes the
step trained on, appended when the batch ships, their nodes carrying `advantages`).
A line is a verifiers record (`to_record()`: token arrays as JSON lists, per-token
floats rounded, `routed_experts` and `sampling_mask` left out): one `Episode` a line
since prime-rl's "score native episodes" change, one `Trace` a line before it. Both
are read, an episode's trace lines as one rollout (`same_episode`). An episode
logged in both subsets is one rollout, its `effective` line folded over its `all`
line, so the row shows what the trainer used.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracewatch.core.errors import TracewatchError
from tracewatch.core.paths import open_regular
from tracewatch.core.recordings.json_lines import json_lines

ROLLOUTS = "rollouts"
KINDS = ("train", "eval")
SUBSETS = ("all", "effective")
"""In the order they are folded: an `effective` line replaces the `all` line of its episode."""
TRACES_FILE = "traces.jsonl"
_STEP = re.compile(r"step_(\d+)")


class PrimeRlDirError(TracewatchError, ValueError):
    """A prime-rl output directory whose rollouts cannot be read."""


@dataclass
class SteppedEpisode:
    """One rollout of a training run: which step and kind logged it, and its episode."""

    step: int
    kind: str
    episode: dict[str, Any]


@dataclass
class PrimeRlRun:
    rollouts_dir: Path
    episodes: list[SteppedEpisode] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Lines that are not records, each with where and why."""


def rollouts_dir(path: str | os.PathLike[str]) -> Path | None:
    """The `rollouts` folder of a prime-rl output directory at `path` (or `path`
    itself, that folder), if it holds a `step_<N>` folder; None otherwise."""
    path = Path(path)
    for folder in (path / ROLLOUTS, path):
        if folder.is_dir() and any(_STEP.fullmatch(child.name) and child.is_dir() for child in folder.iterdir()):
            return folder
    return None


def open_prime_rl(folder: Path) -> PrimeRlRun:
    """Every rollout under a prime-rl `rollouts` folder, by step (ascending), kind,
    then the order its episodes were first logged."""
    run = PrimeRlRun(folder)
    steps = sorted(
        (int(match.group(1)), child)
        for child in folder.iterdir()
        if (match := _STEP.fullmatch(child.name)) is not None and child.is_dir()
    )
    for step, step_dir in steps:
        for kind in KINDS:
            found: dict[str, SteppedEpisode] = {}
            for subset in SUBSETS:
                path = step_dir / kind / subset / TRACES_FILE
                if not path.is_file():
                    continue
                for line, episode in enumerate(_read(path, run.skipped)):
                    # an episode with no id is one of its own: it cannot be told in both subsets
                    key = episode_id if isinstance(episode_id := episode.get("id"), str) else f"{subset}:{line}"
                    if key in found and subset == "effective":
                        found[key].episode = episode
                    else:
                        found.setdefault(key, SteppedEpisode(step, kind, episode))
            run.episodes.extend(found.values())
    if run.skipped and not run.episodes:
        raise PrimeRlDirError(f"{folder} holds no readable rollout: {run.skipped[0]}")
    return run


def _read(path: Path, skipped: list[str]) -> list[dict[str, Any]]:
    try:
        lines = open_regular(path, "prime-rl's traces JSONL")
    except OSError as error:
        skipped.append(f"{path}: cannot be read ({error.strerror or error})")
        return []
    episodes: list[dict[str, Any]] = []
    traced: dict[str, Any] | None = None
    """The episode the last line's trace opened (one trace a line), which the next
    trace of the same episode joins."""
    with lines:
        for number, value, problem in json_lines(lines):
            if problem is not None:
                skipped.append(f"{path} line {number}: {problem}")
                continue
            episode = as_episode(value)
            if episode is None:
                skipped.append(f"{path} line {number}: neither an episode nor a trace record")
            elif episode is not value and traced is not None and same_episode(traced, value):
                join(traced, value)
                continue  # the episode it joined is the one the next trace may join
            else:
                episodes.append(episode)
            traced = episode if episode is not None and episode is not value else None
    return episodes


def same_episode(episode: dict[str, Any], trace: dict[str, Any]) -> bool:
    """Whether a trace line belongs to the episode the lines before it opened. A trace
    record names no episode (prime-rl excluded its link), but the monitor wrote an
    episode's traces one after the other: the next of the same task by an agent not
    seen in the episode yet is taken as its next trace, if it started once the
    episode's traces had ended. verifiers plays an episode's agents one at a time
    (`--env.max-concurrent-agents`), while a group's episodes run at once: without the
    time, an episode that lost an agent's trace took the next episode's first trace."""
    traces = episode["traces"]
    if trace.get("task") != traces[0].get("task") or _agent(trace) in {_agent(t) for t in traces}:
        return False
    started = _started(trace)
    ends = [end for t in traces if (end := _ended(t)) is not None]
    return started is None or not ends or started >= max(ends)


def _started(trace: dict[str, Any]) -> float | None:
    timing = trace.get("timing")
    return _time(timing.get("start")) if isinstance(timing, dict) else None


def _ended(trace: dict[str, Any]) -> float | None:
    """When the trace's last timing span ended (verifiers writes 0 for one that never did)."""
    timing = trace.get("timing")
    if not isinstance(timing, dict):
        return None
    ends = [end for span in timing.values() if isinstance(span, dict) and (end := _time(span.get("end")))]
    return max(ends, default=None)


def _time(value: Any) -> float | None:
    """A timestamp as written, or None for any other value (the wire check's to refuse)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


def join(episode: dict[str, Any], trace: dict[str, Any]) -> None:
    """The episode's standing takes in its next trace's: ok only if every trace is."""
    episode["traces"].append(trace)
    episode["ok"] = bool(episode.get("ok")) and bool(trace.get("ok"))
    episode["is_timeout"] = bool(episode.get("is_timeout")) or bool(trace.get("is_timeout"))
    errors = trace.get("errors")
    if errors and isinstance(errors, list) and isinstance(episode.get("errors") or [], list):
        episode["errors"] = [*(episode.get("errors") or ()), *errors]


def _agent(trace: dict[str, Any]) -> str | None:
    agent = trace.get("agent")
    name = agent.get("name") if isinstance(agent, dict) else None
    return name if isinstance(name, str) else None  # any other value is the wire check's to refuse


def as_episode(value: Any) -> dict[str, Any] | None:
    """A line as an episode: an episode record as it is, a trace record (one trace a
    line, as prime-rl wrote before it logged whole episodes) as an episode of one."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("traces"), list):
        return value
    if isinstance(value.get("nodes"), list) and isinstance(value.get("id"), str):
        head = {key: value[key] for key in ("task", "ok", "is_timeout", "errors") if key in value}
        return {"id": value["id"], **head, "traces": [value]}
    return None
