"""The headless runner against real demo servers: what it prints and in what order."""

from __future__ import annotations

import asyncio
import io

from demo_sessions import demo_variant, write_config

from core.session import headless
from core.session.config import load_config
from core.session.engine import Engine


def test_a_variant_settles_after_its_rollouts_lines(tmp_path, monkeypatch):
    """Issue 11 item 5: with every change landing in one look (a long poll), a
    variant's "done" still comes after the lines of the rollouts that made it done."""
    monkeypatch.setattr(headless, "POLL_SECONDS", 120.0)
    config = load_config(write_config(tmp_path, [demo_variant("baseline", ["normal", "failing", "normal"])]))
    engine = Engine(config, session_dir=tmp_path / "session")
    out = io.StringIO()
    code = asyncio.run(asyncio.wait_for(headless.run_headless(engine, out=out), 60))
    lines = out.getvalue().splitlines()
    assert code == 1  # one rollout failed
    ended = [i for i, line in enumerate(lines) if line.startswith("baseline/") and ("done" in line or "failed" in line)]
    settled = next(i for i, line in enumerate(lines) if line.startswith("baseline: ") and line.split(": ")[1].split(" ")[0] in ("done", "failed"))
    starting = next(i for i, line in enumerate(lines) if line == "baseline: starting")
    assert len(ended) == 3
    assert starting < min(ended) and max(ended) < settled, lines
