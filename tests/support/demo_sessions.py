"""Sessions of real demo servers for tests: a config of demo variants, and the pids
behind a running variant."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tracewatch.core.engine.live import LiveSession

SPEED = 40
WAIT = 30.0
"""How long a condition on real servers may take on a loaded machine."""


def write_config(tmp_path: Path, variants: list[str]) -> Path:
    path = tmp_path / "tracewatch.toml"
    path.write_text("\n".join(variants))
    return path


def demo_variant(name: str, scenarios: list[str], **extra: object) -> str:
    tasks = ", ".join(
        f'{{ id = "{name}-{i}-{s}", name = "{s} task", prompt = "p", scenario = "{s}", kind = "coding" }}'
        for i, s in enumerate(scenarios)
    )
    settings = {"max_concurrent": 4, "health_timeout": 30.0, "grace_seconds": 5.0, **extra}
    lines = [
        "[[variants]]",
        f'name = "{name}"',
        f'command = ["{sys.executable}", "-m", "tracewatch.core.demo", "--address", "{{address}}", "--speed", "{SPEED}"]',
        f"tasks = [{tasks}]",
        'model = "demo-model"',
    ]
    lines += [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def attached_variant(name: str, address: str, **extra: object) -> str:
    """A variant attached to a server at `address`, with one task."""
    lines = ["[[variants]]", f'name = "{name}"', f'attach = "{address}"', 'tasks = [{ id = "t" }]', 'model = "m"']
    return "\n".join([*lines, *(f"{key} = {json.dumps(value)}" for key, value in extra.items())]) + "\n"


def server_pids(engine: LiveSession, name: str) -> list[int]:
    """The supervisor and the server it started, from the supervisor's record."""
    record_path = engine.variants[name].child.record_path
    record = json.loads(record_path.read_text())
    return [record["supervisor_pid"], record["child_pid"]]
