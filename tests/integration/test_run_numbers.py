"""The numbers a session shows of a rollout are the run's own: played by the real demo
server under the real engine and recorder, each number is compared with what the
server replied (its episode) and with the same session's recording opened again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.demo_sessions import demo_variant, write_config
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.config import load_config
from tracewatch.core.session.status import Status

WAIT = 90.0


async def recorded_session(tmp_path: Path, scenarios: list[str]) -> tuple[LiveSession, Path]:
    """One demo variant playing `scenarios` to the end, recorded."""
    path = tmp_path / "session.twrec"
    config = load_config(write_config(tmp_path, [demo_variant("v", scenarios)]))
    engine = LiveSession(config, recorder=Recorder(path, meta={}), session_dir=tmp_path / "session")
    try:
        await engine.start()
        await asyncio.wait_for(engine.wait(), WAIT)
    finally:
        await engine.shutdown()
    return engine, path


async def test_a_provider_400_is_one_error_live_and_opened_as_in_the_servers_episode(tmp_path: Path) -> None:
    """The demo's `failing` run: the provider refuses a call and the trace ends with
    that error. The episode holds one error and one failed call that are the same
    error; the Errors column counts it once, live and in the recording opened later."""
    engine, path = await recorded_session(tmp_path, ["failing"])
    (rollout,) = engine.store.variant_rollouts("v")
    assert rollout.status is Status.FAILED and rollout.record is not None, rollout.reason
    (trace,) = rollout.record["traces"]
    failed = [call["error"] for call in trace["calls"] if call.get("node") is None]
    assert len(trace["errors"]) == len(failed) == 1, "the server's episode: one error and the call it came from"
    assert {k: failed[0][k] for k in ("type", "message")} == {k: trace["errors"][0][k] for k in ("type", "message")}
    assert rollout.errors == 1
    (opened,) = OpenedRecording(path).store.rollouts.values()
    assert (opened.errors, opened.error_text, opened.phase) == (1, rollout.error_text, rollout.phase)
