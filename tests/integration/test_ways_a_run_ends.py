"""Every way out of a run ends its rollout exactly once, with a reason, and the command
exits: malformed replies, malformed or unanswered cancels, rejected deltas. Played by
a scripted server on a real socket, through the real engine, recorder and headless
runner; what was recorded replays to the same ending."""

from __future__ import annotations

from tests.support.polling import eventually
from tests.support.scripted_server import ScriptedServer, attached, endings, good_run, header, replay, run_live
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.recordings.reader import read_recording
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.status import Status


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


async def test_a_bad_delta_while_the_run_is_cancelling_replays_as_cancelled(tmp_path):
    """The run is asked to abort, and the server's last delta before its aborted reply
    is one the client rejects: live ends it cancelled (the user asked), and so must the
    replay, which reads the recording's word that the run was cancelling."""
    scripts = {"silent": [("delta", {"trace": "t", "open": header("t")})]}
    async with ScriptedServer(scripts) as server:
        server.on_cancel = [("delta", {"trace": "t", "nodes": 5})]
        engine, code, out = await run_live(tmp_path, server, ["silent"], cancel_stalled=0.3)
        assert server.cancels, "the stalled run was cancelled over the wire"
    rollout = engine.store.rollouts["remote/0"]
    assert rollout.status is Status.CANCELLED and "'nodes' must be a list" in rollout.reason, out
    assert endings((await replay(tmp_path / "live.twrec")).store) == endings(engine.store)


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


async def test_stopping_a_variant_asks_each_run_to_abort_once_and_ends_each_once(tmp_path):
    """A variant-wide stop sends its cancels without awaiting their answers (this server
    answers none and aborts nothing): the server is asked once per run, and each
    rollout ends once, cancelled with the variant, in the store and the recording."""
    tasks = [f"t{i}" for i in range(3)]
    scripts = {task: [("delta", {"trace": "t", "open": header("t")})] for task in tasks}
    async with ScriptedServer(scripts) as server:
        server.cancel_reply = None
        server.abort_on_cancel = False
        config = attached(server.address, tasks, tmp_path, max_concurrent=len(tasks))
        engine = LiveSession(config, recorder=Recorder(tmp_path / "live.twrec"), session_dir=tmp_path / "session")
        store = engine.store
        await engine.start()
        await eventually(lambda: all(r.deltas for r in store.rollouts.values()), what="every run streaming")
        request_ids = {r.request_id for r in store.rollouts.values()}
        await engine.shutdown()
        await eventually(lambda: set(server.cancels) == request_ids, what="a cancel for every run")
        assert sorted(server.cancels) == sorted(request_ids)
    assert endings(store) == {key: (Status.CANCELLED, "cancelled with the variant") for key in store.rollouts}
    replies = [r["id"] for r in read_recording(tmp_path / "live.twrec") if r["k"] == "reply"]
    assert sorted(replies) == sorted(store.rollouts)
    assert endings((await replay(tmp_path / "live.twrec")).store) == endings(store)
