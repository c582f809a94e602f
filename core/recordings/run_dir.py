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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracewatch.core.errors import TracewatchError
from tracewatch.core.paths import open_regular
from tracewatch.core.recordings.json_lines import json_lines
from tracewatch.core.session.config import MAX_CONFIG_BYTES

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
    config_problem: str | None = None
    """Why the saved config could not be read (the episodes still are)."""
    skipped: list[str] = field(default_factory=list)
    """Lines that are not episodes, each with why: a run killed mid-write leaves a
    cut last line, which verifiers' own resume also drops."""

    def episodes(self) -> Iterator[dict[str, Any]]:
        """The file's episodes, read now one line at a time (a reader loads each and
        lets it go: the file is never held whole); lines that are not episodes are
        added to `skipped`. `RunDirError` at the end if no line was an episode but
        some line was something else: then it is not a traces file at all."""
        try:
            lines = open_regular(self.traces_path, "a verifiers traces JSONL file")
        except OSError as error:
            raise RunDirError(_cannot_read(self.traces_path, error)) from None
        found = False
        with lines:
            for number, value, problem in json_lines(lines):
                if problem is None and (not isinstance(value, dict) or not isinstance(value.get("traces"), list)):
                    problem = "not an episode (no 'traces' list)"
                if problem is not None:
                    self.skipped.append(f"line {number}: {problem}")
                else:
                    found = True
                    yield value
        if self.skipped and not found:
            raise RunDirError(f"{self.traces_path} is not a verifiers traces file: no line is an episode ({self.skipped[0]})")


def open_run(path: str | os.PathLike[str]) -> FinishedRun:
    """A finished (or still running) verifiers run, from its run directory or a bare
    traces JSONL file, its episodes to be read (`FinishedRun.episodes`); `RunDirError`
    for anything else, saying what it is."""
    path = Path(path)
    if path.is_dir():
        traces_path = path / TRACES_FILE
        if not os.path.lexists(traces_path):
            raise RunDirError(_no_traces(path))
        run_dir: Path | None = path
    elif os.path.lexists(path):
        traces_path = path
        # a run dir's own traces.jsonl: its config is beside it
        run_dir = path.parent if (path.parent / RESOLVED_CONFIGS).is_dir() else None
    else:
        raise RunDirError(f"{path} does not exist")
    try:
        open_regular(traces_path, "a verifiers run directory or traces JSONL file").close()
    except OSError as error:
        raise RunDirError(_cannot_read(traces_path, error)) from None
    config_path = _saved_config(run_dir) if run_dir is not None else None
    run = FinishedRun(traces_path, run_dir, None, config_path)
    if config_path is not None:
        run.config, run.config_problem = _read_config(config_path)
    return run


def _read_config(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The run's saved config, or why it cannot be read: it only describes the run,
    so a bad one costs the description, never the episodes."""
    try:
        with open_regular(path, "the run's saved config (JSON)") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            return None, f"{path}: larger than {MAX_CONFIG_BYTES / (1 << 20):g} MiB; not read as the run's saved config"
        config = json.loads(data)
    except OSError as error:
        return None, f"the run's saved config cannot be read: {_cannot_read(path, error)}"
    except RecursionError:
        return None, f"{path}: the run's saved config is nested deeper than JSON is read here"
    except ValueError as error:
        return None, f"{path}: the run's saved config is not JSON ({error})"
    if not isinstance(config, dict):
        return None, f"{path}: the run's saved config is not a JSON object"
    return config, None


def _cannot_read(path: Path, error: OSError) -> str:
    """`open_regular`'s own words (what the file is instead), or the system's."""
    return str(error) if error.errno is None else f"cannot read {path}: {error.strerror}"


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
