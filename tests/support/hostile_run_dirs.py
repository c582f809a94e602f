"""Run folders other programs wrote, made hostile: a verifiers run directory
(`traces.jsonl` and its saved config) or a prime-rl output directory in the older
`rollouts/step_N/<kind>/<subset>/traces.jsonl` layout (one episode or one trace a
line). Real episodes (verifiers' recorded fixture and the demo's training rollout,
whose nodes carry token arrays) are changed where readers look by the same
strategies the wire's boundary check is tested with (`hostile_values`, its JSON
kind: integers of any size, NaN and infinities), and lines and config files that are
not what they claim are mixed in."""

from __future__ import annotations

import asyncio
import copy
import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.support.hostile_values import JSON, extreme_numbers, mutate, number_themes
from tests.support.prime_rl_run import with_judge
from tests.support.training_session import training_episode
from tests.support.tui_standin import fixture_episodes

DEEP = 100_000
"""Past any recursion limit: json's own parser raises RecursionError on it."""
BAD_LINES = {
    "deep list": b"[" * DEEP + b"]" * DEEP,
    "deep map": b'{"traces": [' + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"]}",
    "not JSON": b"{not json",
    "a number": b"5",
    "no traces": b'{"id": "x"}',
    "traces not a list": b'{"id": "x", "traces": 5}',
    "a huge integer": b'{"traces": [], "id": ' + b"9" * 5000 + b"}",
    "not UTF-8": b'{"traces": [], "id": "\xff"}',
}
"""Lines that are not episodes (a cut last line is drawn apart)."""
CONFIGS = ("good", "deep", "not JSON", "a list", "a FIFO", "/dev/zero", "a directory", "none")


@cache
def base_episodes() -> tuple[dict[str, Any], ...]:
    """verifiers' recorded episodes, and the demo's training rollout (token arrays on
    its nodes) as a second agent's too (a multi-trace episode)."""
    training = asyncio.run(training_episode())
    return (*fixture_episodes(), training, with_judge(training))


@dataclass
class HostileRun:
    """What to write; `write` lays it out under a folder."""

    lines: list[bytes]
    episodes: dict[int, str]
    """Line number -> episode id of the lines that were written unchanged."""
    config: str
    prime_rl: bool = False
    per_trace: bool = False
    steps: list[tuple[int, str, str]] = field(default_factory=list)
    """prime-rl: the (step, kind, subset) each line goes to, in order."""

    def write(self, folder: Path) -> Path:
        if self.prime_rl:
            for line, (step, kind, subset) in zip(self.lines, self.steps):
                path = folder / "rollouts" / f"step_{step}" / kind / subset / "traces.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "ab") as file:
                    file.write(line)
            return folder
        folder.mkdir(parents=True)
        (folder / "traces.jsonl").write_bytes(b"".join(self.lines))
        write_config(folder / "configs" / "resolved" / "eval.json", self.config)
        return folder


def write_config(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True)
    if kind == "good":
        path.write_text('{"model": "m"}')
    elif kind == "deep":
        path.write_text("[" * DEEP + "]" * DEEP)
    elif kind == "not JSON":
        path.write_text("{")
    elif kind == "a list":
        path.write_text("[1]")
    elif kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "a directory":
        path.mkdir()


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()  # NaN and infinities as Python writes them, any integer


@st.composite
def hostile_runs(draw: st.DrawFn, prime_rl: bool = False) -> HostileRun:
    """A run of two to five real episodes, some changed one to three times anywhere,
    with bad lines among them and a last line that may be cut."""
    picked = draw(st.lists(st.integers(0, len(base_episodes()) - 1), min_size=2, max_size=5))
    per_trace = prime_rl and draw(st.booleans())
    theme = draw(number_themes(JSON))
    lines: list[bytes] = []
    unchanged: dict[int, str] = {}
    for number in picked:
        episode = copy.deepcopy(base_episodes()[number])
        episode["id"] = f"episode-{len(lines)}"
        changed = draw(st.integers(0, 3)) > 0
        if changed and draw(st.integers(0, 2)) > 0:
            extreme_numbers(draw, episode, JSON, theme)
        elif changed:
            for _ in range(draw(st.integers(1, 3))):
                mutate(draw, episode, 1, JSON)
        else:
            unchanged[len(lines)] = episode["id"]
        records = episode.get("traces") if per_trace and isinstance(episode.get("traces"), list) else [episode]
        lines.extend(_dumps(record) + b"\n" for record in records)
        if per_trace and not changed:
            del unchanged[len(lines) - len(records)]  # its traces rejoin as one episode by guess: compared apart
        if draw(st.integers(0, 4)) == 0:
            lines.append(BAD_LINES[draw(st.sampled_from(sorted(BAD_LINES)))] + b"\n")
    if draw(st.integers(0, 4)) == 0:
        last = lines.pop()
        lines.append(last[: draw(st.integers(1, max(1, len(last) - 2)))])  # the writer stopped mid-line
        unchanged.pop(len(lines) - 1, None)
    steps = [(draw(st.integers(0, 2)), draw(st.sampled_from(["train", "eval"])), draw(st.sampled_from(["all", "effective"]))) for _ in lines] if prime_rl else []
    config = draw(st.sampled_from(CONFIGS)) if not prime_rl else "none"
    return HostileRun(lines, unchanged if not prime_rl else {}, config, prime_rl, per_trace, steps)
