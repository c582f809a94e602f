"""Every way out of a run ends its rollout exactly once, with a reason, and the command
exits: malformed replies, malformed or unanswered cancels, rejected deltas. Played by
a scripted server on a real socket, through the real engine, recorder and headless
runner; what was recorded replays to the same ending."""

from __future__ import annotations

from scripted_server import ScriptedServer, endings, good_run, header, replay, run_live

from core.recordings.reader import read_recording
from core.session.store import Status


async def test_a_failure_reply_with_a_non_text_error_fails_its_rollout(tmp_path):
    scripts = {"bad": [("delta", {"trace": "t", "open": header("t")}), ("reply", {"success": False, "error": 5})], "good": good_run()}
    async with ScriptedServer(scripts) as server:
        engine, code, out = await run_live(tmp_path, server, ["bad", "good"])
    bad, good = engine.store.rollouts["remote/0"], engine.store.rollouts["remote/1"]
    assert bad.status is Status.FAILED, out
    assert "run reply is malformed: error: input should be a valid string (got 5)" in bad.reason
    assert good.status is Status.DONE and code == 1
    assert endings((await replay(tmp_path / "live.twrec")).store) == endings(engine.store)


async def test_a_malformed_cancel_reply_still_ends_a_stalled_rollout(tmp_path):
    scripts = {"silent": [("delta", {"trace": "t", "open": header("t")})]}
    async with ScriptedServer(scripts) as server:
        server.cancel_reply = {"success": "perhaps", "cancelled": [1]}
        server.abort_on_cancel = False
        engine, code, out = await run_live(tmp_path, server, ["silent"], cancel_stalled=0.3)
        assert server.cancels, "the stalled run was cancelled over the wire"
    rollout = engine.store.rollouts["remote/0"]
    assert rollout.status is Status.CANCELLED, out
    assert "did not answer the cancel: the server's cancel reply is malformed" in rollout.reason
    assert code == 1


async def test_a_cancel_taken_but_never_followed_by_a_reply_ends_the_rollout(tmp_path):
    scripts = {"silent": [("delta", {"trace": "t", "open": header("t")})]}
    async with ScriptedServer(scripts) as server:
        server.abort_on_cancel = False
        engine, code, out = await run_live(tmp_path, server, ["silent"], cancel_stalled=0.3)
    rollout = engine.store.rollouts["remote/0"]
    assert rollout.status is Status.CANCELLED, out
    assert "took the cancel but sent no reply" in rollout.reason


async def test_a_rejected_delta_is_recorded_first_and_replays_to_the_same_failure(tmp_path):
    rejected = {"trace": "t", "nodes": 5}
    scripts = {
        "bad": [("delta", {"trace": "t", "open": header("t")}), ("delta", rejected), *good_run("t")[1:]],
        "good": good_run(),
    }
    async with ScriptedServer(scripts) as server:
        engine, code, out = await run_live(tmp_path, server, ["bad", "good"])
    bad = engine.store.rollouts["remote/0"]
    assert bad.status is Status.FAILED and "'nodes' must be a list" in bad.reason, out
    recorded = [r["d"] for r in read_recording(tmp_path / "live.twrec") if r["k"] == "delta" and r["id"] == "remote/0"]
    assert rejected in recorded
    assert endings((await replay(tmp_path / "live.twrec")).store) == endings(engine.store)
