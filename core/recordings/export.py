"""Recordings out as JSON lines: every record, or one episode per rollout (the shape
of a verifiers `traces.jsonl`), encoded as `tracewatch.core.wire.episode_json` writes wire values.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tracewatch.core.paths import private_output
from tracewatch.core.recordings.ending import end_field, recorded_ending
from tracewatch.core.recordings.index import RecordingIndex
from tracewatch.core.recordings.reader import read_recording
from tracewatch.core.session.status import Ending, Status
from tracewatch.core.wire.assembly import AssemblyError, EpisodeAssembly
from tracewatch.core.wire.episode_json import json_line, partial_episode

ORIGIN_KEY = "tracewatch"
"""An exported episode's own key for where it came from: rollout id, variant, task
and rollout index, and how it ended. Verifiers' `Episode` ignores keys it does not
know; the variant is also `env.name`, the field verifiers keeps for the name a
consumer runs an env under."""


def rebuild_episodes(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Replay recorded deltas and replies through `EpisodeAssembly`: the episode of
    every rollout whose run replied with one, by rollout id, in reply order. A
    `request` record starts a fresh episode (a rollout run again). A stream that does
    not assemble raises `AssemblyError` naming the rollout."""
    assemblies: dict[str, EpisodeAssembly] = {}
    episodes: dict[str, dict[str, Any]] = {}
    for record in records:
        kind = record.get("k")
        rollout_id = str(record.get("id"))
        try:
            if kind == "request":
                assemblies[rollout_id] = EpisodeAssembly()
            elif kind == "delta":
                assemblies.setdefault(rollout_id, EpisodeAssembly()).apply(record["d"])
            elif kind == "reply":
                reply = record["r"]
                assembly = assemblies.pop(rollout_id, None) or EpisodeAssembly()
                if reply.get("success") and reply.get("head") is not None:
                    episodes[rollout_id] = assembly.finish(reply["head"], reply.get("traces") or ())
        except AssemblyError as error:
            raise AssemblyError(f"rollout {rollout_id}: {error}") from error
    return episodes


def rollout_episode(rollout_id: str, records: Iterable[Mapping[str, Any]], ending: Ending | None) -> dict[str, Any] | None:
    """One rollout's records as the line `export --episodes` writes: its (last) run's
    episode, or a partial one (why: `ending`, as the index read it; None if it had not
    ended); stamped with where it came from (`ORIGIN_KEY`, and the variant as
    `env.name`). None for a rollout that never started."""
    announce: Mapping[str, Any] = {}
    assembly: EpisodeAssembly | None = None
    episode: dict[str, Any] | None = None
    broken: str | None = None
    for record in records:
        kind = record.get("k")
        try:
            if kind == "rollout":
                announce = record
            elif kind == "request":
                assembly, episode, broken = EpisodeAssembly(), None, None
            elif kind == "delta" and broken is None:
                assembly = assembly or EpisodeAssembly()
                assembly.apply(record["d"])
            elif kind == "reply" and broken is None:
                reply = record["r"]
                if reply.get("success") and reply.get("head") is not None:
                    assembly = assembly or EpisodeAssembly()
                    episode = assembly.finish(reply["head"], reply.get("traces") or ())
        except AssemblyError as error:
            # a delta the run failed on live (recorded first, then refused), or a
            # damaged recording: the traces it had before, and why it stopped there
            broken = str(error)
    if assembly is None:
        return None
    if episode is None:
        reason = "no reply: it was still running when the recording ended" if ending is None else ending.reason
        reason = broken or reason
        episode = partial_episode(announce.get("task_data") or {}, assembly.traces.values(), reason)
    variant = announce.get("variant") or rollout_id.partition("/")[0]
    episode["env"] = {**(episode.get("env") or {}), "name": variant}
    episode[ORIGIN_KEY] = {
        "rollout": rollout_id,
        "variant": variant,
        "task_index": announce.get("task_index", 0),
        "rollout_index": announce.get("rollout_index", 0),
        "run": announce.get("run", 1),
        "ended": Status.RUNNING.value if ending is None else ending.status.value,
    }
    return episode


@dataclass
class Exported:
    """What `export_recording` wrote and what it could not."""

    lines: int = 0
    truncated: str | None = None
    """The reader's note when the recording was cut short."""
    partial: dict[str, list[str]] = field(default_factory=dict)
    """Rollout ids written as partial episodes, by how they ended (cancelled, ...)."""
    skipped: list[str] = field(default_factory=list)
    """Rollouts not written: they never started, so there is nothing to write."""
    unreadable: list[str] = field(default_factory=list)
    """Episodes whose record could not be read, each with why."""
    unwritable: int = 0
    """Records (or episodes) left out because JSON cannot hold them: nested deeper
    than `episode_json.JSON_DEPTH`, which only a hostile server sends (the run failed on it)."""


def export_recording(
    path_in: str | os.PathLike[str], path_out: str | os.PathLike[str], *, episodes: bool = False
) -> Exported:
    """Write a recording as JSONL.

    By default every record, in order, after the header line (a reply carries `end`,
    how the rollout ended, older recordings' too). With `episodes`, one
    episode per rollout that started (the shape of a verifiers `traces.jsonl`; a run
    that ended without one is written partial), rebuilt one at a time from the index,
    so memory holds one rollout, not the recording. The output appears only when
    complete (written beside it, then renamed) and is private (0600), as the
    recording is.
    """
    result = Exported()
    with private_output(path_out) as out:
        if episodes:
            index = RecordingIndex.build(path_in)
            result.truncated = index.truncated
            for rollout_id, summary in index.rollouts.items():
                episode = rollout_episode(rollout_id, index.load(rollout_id), summary.ending)
                if episode is None:
                    result.skipped.append(rollout_id)
                    continue
                if episode.get("partial"):
                    result.partial.setdefault(summary.status.value, []).append(rollout_id)
                result.lines += _write_line(out, episode, result)
        else:
            recording = read_recording(path_in)
            out.write(json_line(recording.header) + "\n")
            result.lines += 1
            for record in recording:
                if record.get("k") == "reply":
                    record = {**record, "end": end_field(recorded_ending(record))}
                result.lines += _write_line(out, record, result)
            result.truncated = recording.truncated
    return result


def export_records(records: Iterable[tuple[str, dict[str, Any] | None, str | None]], path_out: str | os.PathLike[str]) -> Exported:
    """Episode records read elsewhere (a prime-rl run's, one at a time) as JSONL, one
    a line, written as `export_recording` writes; a record that cannot be read is
    left out and said (`unreadable`)."""
    result = Exported()
    with private_output(path_out) as out:
        for key, record, problem in records:
            if record is None:
                result.unreadable.append(f"{key}: {problem}")
            else:
                result.lines += _write_line(out, record, result)
    return result


def _write_line(out: Any, value: Any, result: Exported) -> int:
    """One JSON line; 0 (and counted) for a value JSON cannot hold."""
    try:
        line = json_line(value)
    except ValueError:
        result.unwritable += 1
        return 0
    out.write(line + "\n")
    return 1

