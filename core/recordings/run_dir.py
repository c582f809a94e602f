"""Finished verifiers runs, opened as episodes to browse like recorded ones.

verifiers 0.4.0 (`v1/cli/output.py`, `v1/utils/trace_store.py`) lays a run out as:

    <run dir>/traces.jsonl                  one Episode a line, appended as each lands
    <run dir>/configs/resolved/<cli>.json   the resolved config (eval.json, debug.json, ...)
    <run dir>/configs/<cli>.toml            the launch TOML, if the run was launched with one
    <run dir>/logs/attempt_<n>/...          logs

Each line is `Episode` dumped by pydantic with `exclude_none=True`: the episode's
head (id, env, task, group, run, ok, is_timeout, errors, token counts) and `traces`,
each a dumped `Trace`, the same shape `EpisodeAssembly.finish` gives, except that a
field whose value is null is absent (a root node has no `parent` key): read optional
fields with `.get`. The msgpack-only arrays (`routed_experts`, `sampling_mask`) are
not on disk.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracewatch.core.errors import TracewatchError

TRACES_FILE = "traces.jsonl"
RESOLVED_CONFIGS = Path("configs") / "resolved"


class RunDirError(TracewatchError, ValueError):
    """The path is neither a verifiers run directory nor a traces JSONL file."""


@dataclass
class FinishedRun:
    traces_path: Path
    run_dir: Path | None
    """None for a bare traces file with no run directory around it."""
    config: dict[str, Any] | None
    """The resolved config the run was launched with, if the run dir kept one."""
    config_path: Path | None
    episodes: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Lines that are not episodes, each with why: a run killed mid-write leaves a
    cut last line, which verifiers' own resume also drops."""


def open_run(path: str | os.PathLike[str]) -> FinishedRun:
    """The episodes of a finished (or still running) verifiers run, from its run
    directory or a bare traces JSONL file; `RunDirError` for anything else."""
    path = Path(path)
    if path.is_dir():
        traces_path = path / TRACES_FILE
        if not traces_path.is_file():
            raise RunDirError(_no_traces(path))
        run_dir: Path | None = path
    elif path.is_file():
        traces_path = path
        # a run dir's own traces.jsonl: its config is beside it
        run_dir = path.parent if (path.parent / RESOLVED_CONFIGS).is_dir() else None
    else:
        raise RunDirError(f"{path} does not exist")
    config_path = _saved_config(run_dir) if run_dir is not None else None
    config = None
    if config_path is not None:
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise RunDirError(f"{config_path}: the run's saved config cannot be read ({error})") from None
    run = FinishedRun(traces_path, run_dir, config, config_path)
    try:
        lines = open(traces_path, "rb")
    except OSError as error:
        raise RunDirError(f"cannot read {traces_path}: {error.strerror or error}") from None
    with lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            episode, problem = _parse_episode(line)
            if episode is not None:
                run.episodes.append(episode)
            elif not line.endswith(b"\n"):
                run.skipped.append(f"line {number} is cut short (the run was killed while writing it)")
            else:
                run.skipped.append(f"line {number}: {problem}")
    if run.skipped and not run.episodes:
        raise RunDirError(
            f"{traces_path} is not a verifiers traces file: no line is an episode "
            f"({run.skipped[0]})"
        )
    return run


def _parse_episode(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The episode on this line, or what is wrong with it."""
    try:
        value = json.loads(line)
    except ValueError as error:
        return None, f"not JSON ({error})"
    if not isinstance(value, dict) or not isinstance(value.get("traces"), list):
        return None, "not an episode (no 'traces' list)"
    return value, None


def _saved_config(run_dir: Path) -> Path | None:
    """The first resolved config, as verifiers' `saved_config_path` picks it."""
    folder = run_dir / RESOLVED_CONFIGS
    candidates = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return candidates[0] if candidates else None


def _no_traces(folder: Path) -> str:
    runs = sorted(p.parent.name for p in folder.glob(f"*/{TRACES_FILE}"))
    hint = (
        f"; it holds runs: {', '.join(runs[:5])}{' ...' if len(runs) > 5 else ''}"
        if runs
        else f"; a verifiers run dir holds {TRACES_FILE} and {RESOLVED_CONFIGS}/<cli>.json"
    )
    return f"{folder} has no {TRACES_FILE}{hint}"
