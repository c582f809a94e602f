"""The verifiers 0.4.0 fixture's stream, and a recording of it as the app records it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.repo import FIXTURE
from tracewatch.core.recordings.recorder import Recorder


def fixture_stream() -> tuple[list[dict], list[dict], list[dict]]:
    deltas = [json.loads(line) for line in (FIXTURE / "deltas.jsonl").read_text().splitlines()]
    runs = [r for r in json.loads((FIXTURE / "requests.json").read_text()) if r["method"] == "run"]
    replies = [r for r in json.loads((FIXTURE / "replies.json").read_text()) if r["request"]]
    return runs, deltas, replies


def record_fixture(path: Path) -> None:
    """The fixture's runs as the app records them: announce, request, every delta in
    arrival order (runs interleaved), then the replies."""
    runs, deltas, replies = fixture_stream()
    with Recorder(path, meta={"source": "verifiers-0.4.0 fixture"}) as rec:
        for index, run in enumerate(runs):
            rollout_id = f"fixture/{run['request']}"
            rec.rollout(rollout_id, "fixture", index, run["payload"]["task_data"], 0)
            rec.request(rollout_id, run["request_id"])
        for row in deltas:
            rec.delta(f"fixture/{row['request']}", row["delta"], t=row["t"])
        for row in replies:
            rec.reply(f"fixture/{row['request']}", row["reply"])
