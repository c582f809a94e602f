"""How a rollout ended is one recorded fact: every reader of a recording (replay, an
opened recording before and after a rollout is loaded, export) says the same, for
recordings that carry it and for older ones that do not."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.engine.replay import ReplaySession
from tracewatch.core.recordings.export import export_recording
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.status import Ending, Status
from tracewatch.core.wire.protocol import ABORTED_ERROR

KEY = "v/0"
EPISODE = {"success": True, "error": None, "head": {"ok": True}, "traces": []}


def record(path: Path, reply: dict, ending: Ending | None) -> None:
    with Recorder(path) as rec:
        rec.rollout(KEY, "v", 0, {"name": "task"}, 0, t=1.0)
        rec.request(KEY, "req", t=2.0)
        rec.reply(KEY, reply, ending, t=3.0)


def every_reading(path: Path) -> list[tuple[str, Ending]]:
    """How each reader tells the rollout ended."""
    replay = ReplaySession(path, speed=0)

    async def play() -> None:
        await replay.start()
        await asyncio.wait_for(replay.wait(), 30)

    asyncio.run(play())
    opened = OpenedRecording(path)
    listed = opened.store.rollouts[KEY].ending
    opened.select(KEY)
    out = path.with_suffix(".jsonl")
    export_recording(path, out)
    lines = [json.loads(line) for line in out.read_text().split("\n") if line]  # JSON may hold U+0085: not splitlines
    end = next(line for line in lines if line.get("k") == "reply")["end"]
    readings = [
        ("replay", replay.store.rollouts[KEY].ending),
        ("open, listed", listed),
        ("open, selected", opened.store.rollouts[KEY].ending),
        ("export", Ending(Status(end["status"]), end["reason"])),
    ]
    return [(name, ending) for name, ending in readings if ending is not None]


def test_a_recorded_ending_is_read_the_same_everywhere(tmp_path):
    for n, ending in enumerate([
        Ending(Status.CANCELLED, "cancelled with the variant"),
        Ending(Status.CANCELLED, "ProviderError: upstream 500"),  # a user's cancel, whatever the error said
        Ending(Status.FAILED, "the server exited with code 1 mid-run"),
        Ending(Status.DONE),
    ]):
        path = tmp_path / f"{n}.twrec"
        reply = EPISODE if ending.status is Status.DONE else {"success": False, "error": ending.reason}
        record(path, reply, ending)
        assert every_reading(path) == [(name, ending) for name in ("replay", "open, listed", "open, selected", "export")]


def test_older_recordings_keep_their_cancels(tmp_path):
    for n, reason in enumerate([ABORTED_ERROR, "cancelled with the variant", "cancelled before it started",
                                "cancelled here; the server no longer held the run"]):
        path = tmp_path / f"{n}.twrec"
        record(path, {"success": False, "error": reason}, None)
        assert {ending for _, ending in every_reading(path)} == {Ending(Status.CANCELLED, reason)}


@settings(max_examples=25, deadline=None)
@given(st.text())
def test_an_older_recordings_error_is_a_failure_whatever_it_says(text):
    """"cancelled" inside a provider's error does not make the rollout cancelled."""
    error = f"ProviderError: {text} cancelled"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "old.twrec"
        record(path, {"success": False, "error": error}, None)
        readings = every_reading(path)
        assert len(readings) == 4
        assert {ending for _, ending in readings} == {Ending(Status.FAILED, error)}
