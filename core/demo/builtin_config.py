"""The built-in demo as a config: what `tracewatch` with no arguments runs."""

from __future__ import annotations

from pathlib import Path

from tracewatch.core.demo import MODEL, TOKENIZER
from tracewatch.core.demo.tasks import DEFAULT_TASKS
from tracewatch.core.session.config import Config, build_config
from tracewatch.core.session.config_errors import ConfigError, Problem


def demo_config(python: str, speed: float = 1.0) -> Config:
    """The built-in demo: two demo env servers that differ in seed and temperature,
    sharing the demo's task list and tokenizer, started with `python` (the app's own interpreter);
    `speed` divides every wait in the demo's rollouts."""
    if not speed > 0:
        raise ConfigError([Problem("built-in demo", "speed", f"expected more than 0, got {speed!r}")])
    variants = [
        {
            "name": name,
            "command": [
                python, "-m", "tracewatch.core.demo", "--address", "{address}",
                "--seed", str(seed), "--speed", repr(float(speed)),
            ],
            "tasks": DEFAULT_TASKS,
            "model": MODEL,
            "sampling": {"temperature": temperature},
            "health_timeout": 30.0,
            "tokenizer": str(TOKENIZER),
        }
        for name, seed, temperature in (("baseline", 1, 0.2), ("candidate", 2, 0.8))
    ]
    return build_config({"variants": variants}, "built-in demo", Path.cwd())
