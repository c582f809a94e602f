"""A prime-rl training run's rollouts on disk, written as prime-rl's file monitor writes them.

Mirrors `FileMonitor.log_episodes` (prime-rl `src/prime_rl/monitors/file.py`, commit
559b44772e471d1538537b8805cc77f3824a5e64): each cohort is appended to
`<output dir>/rollouts/step_<N>/<kind>/<subset>/traces.jsonl`, one verifiers record a
line, `Episode.to_record()` since prime-rl 03cdc5157 ("score native episodes") and each
trace's `Trace.to_record()` before it (9975d8868). The records come from verifiers'
own models, so every field is the one prime-rl writes. prime-rl dumps with orjson
(compact, a newline after each); `json` with compact separators writes the same text
for these records, and the project does not depend on orjson.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from verifiers.v1.episode import WireEpisode

from tests.support.tui_standin import fixture_episodes


def verifiers_agent(episode: dict[str, Any]) -> dict[str, Any]:
    """`episode` with each trace's agent a full verifiers one (the recorded fixture's):
    the demo's agent config leaves out what verifiers' models require."""
    agent = fixture_episodes()[0]["traces"][0]["agent"]
    episode = copy.deepcopy(episode)
    for trace in episode["traces"]:
        trace["agent"] = copy.deepcopy(agent)
    return episode


def log_episodes(output_dir: Path, episodes: list[dict[str, Any]], step: int, kind: str, subset: str, per_trace: bool = False) -> Path:
    """Append `episodes` as the monitor logs a cohort; `per_trace` writes one trace a
    line, as prime-rl did before it logged whole episodes."""
    path = output_dir / "rollouts" / f"step_{step}" / kind / subset / "traces.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        for episode in episodes:
            model = WireEpisode.model_validate(episode)
            records = [trace.to_record() for trace in model.traces] if per_trace else [model.to_record()]
            for record in records:
                f.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
    return path


def credited(episode: dict[str, Any], advantage: float) -> dict[str, Any]:
    """`episode` as the effective cohort logs it: the trainer's credit assigned, one
    advantage per sampled token (the compact layout, one per True in a node's mask)."""
    episode = copy.deepcopy(episode)
    for trace in episode["traces"]:
        for node in trace["nodes"]:
            sampled = sum(1 for trained in node.get("mask") or () if trained)
            node["advantages"] = [advantage] * sampled if sampled else None
    return episode


def renamed(episode: dict[str, Any], number: int) -> dict[str, Any]:
    """A copy with its own episode and trace ids, as a second rollout of the task has."""
    episode = copy.deepcopy(episode)
    episode["id"] = f"{episode['id'][:24]}{number:08x}"
    for trace in episode["traces"]:
        trace["id"] = f"{trace['id'][:24]}{number:08x}"
    return episode


def with_judge(episode: dict[str, Any], name: str = "judge") -> dict[str, Any]:
    """`episode` with one more trace, a judge's (a copy of its first under its own id,
    the first's reversed and led by the trace's number, and agent `name`), as a
    multi-agent episode has."""
    episode = copy.deepcopy(episode)
    judge = copy.deepcopy(episode["traces"][0])
    judge["id"] = f"{len(episode['traces']):02x}{judge['id'][::-1][2:]}"
    judge["agent"]["name"] = name
    judge["timing"] = after(episode["traces"][-1]["timing"], judge["timing"])
    episode["traces"].append(judge)
    return episode


def after(previous: dict[str, Any], timing: dict[str, Any]) -> dict[str, Any]:
    """`timing` moved to start when `previous` ended, as verifiers plays an episode's
    agents one at a time."""
    ended = max(span["end"] for span in previous.values() if isinstance(span, dict))
    shift = ended - timing["start"]
    moved = {key: {**span, "start": span["start"] + shift, "end": span["end"] + shift} if isinstance(span, dict) else span for key, span in timing.items()}
    return {**moved, "start": timing["start"] + shift}
