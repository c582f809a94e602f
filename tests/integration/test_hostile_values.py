"""Wrong-typed and hostile values a server may send: each fails its own run with a
clear reason at the boundary (the values readers rely on are checked once per delta),
every other run goes on, and every reader (store stats, the headless summary, replay,
open, export, the app's table, transcript and timing) takes what passed. Played by a
scripted server on a real socket through the real engine, recorder and headless run."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import msgpack
import pytest

from tests.support.polling import until
from tests.support.scripted_server import DEADLINE, ScriptedServer, attached, endings, good_run, header, replay
from tracewatch.core.engine.headless import run_headless, summary_lines
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.engine.replay import ReplaySession
from tracewatch.core.recordings.export import export_recording
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.status import Status
from tracewatch.core.wire.assembly import AssemblyError, EpisodeAssembly
from tracewatch.core.wire.delta_checks import MAX_DEPTH
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.table.rollouts_table import RolloutsTable
from tracewatch.tui.trace.trace_pane import TracePane


def deep_content(levels: int) -> bytes:
    """A user node whose content is `levels` maps deep, packed by hand: msgpack itself
    refuses to pack past 511 levels, a hostile server need not."""
    placeholder = msgpack.packb("@@")
    delta = msgpack.packb({"trace": "t", "nodes": [{"parent": None, "message": {"role": "user", "content": "@@"}}]})
    return delta.replace(placeholder, b"\x81\xa1a" * levels + msgpack.packb("x"))


HOSTILE = {
    "tokens-text": ({"trace": "t", "set": {"num_total_tokens": "abc"}}, "num_total_tokens must be a whole number of tokens, got str 'abc'"),
    "timing-text": ({"trace": "t", "set": {"timing": {"agent": {"start": "soon"}}}}, "set.timing.agent.start must be seconds (a finite number) or null, got str 'soon'"),
    "pending-int": ({"trace": "t", "pending": 5}, "'pending' must be a list of messages, got int"),
    "call-int": ({"trace": "t", "calls": [5]}, "calls[0] must be a map, got int 5"),
    "message-text": ({"trace": "t", "nodes": [{"parent": None, "message": "x"}]}, "nodes[0].message must be a map, got str 'x'"),
    "set-nodes": ({"trace": "t", "set": {"nodes": 5}}, "'set' may not overwrite nodes"),
    "deep": (deep_content(1020), "values are nested deeper than 64 levels"),
}


def nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def scripts() -> dict[str, list]:
    plays = {name: [("delta", {"trace": "t", "open": header("t")}), ("delta", delta), *good_run()[1:]] for name, (delta, _) in HOSTILE.items()}
    # seeded-null rewards are what verifiers sends before scoring: kept, read as unscored
    unscored = good_run()
    unscored[-2] = ("delta", {"trace": "t", "set": {"ok": True, "rewards": {"r": {"score": None}}}})
    # token arrays are kept unscanned (scanning costs more than decoding): no reader walks
    # them but export, which leaves out what JSON cannot hold
    deep_array = good_run(turns=1)
    deep_array[1][1]["nodes"][1]["token_ids"] = nested(300)
    return {**plays, "reward-null": unscored, "deep-array": deep_array, "good": good_run()}


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> tuple[Path, LiveSession, int, str]:
    tmp_path = tmp_path_factory.mktemp("hostile")

    async def run() -> tuple[LiveSession, int, str]:
        async with ScriptedServer(scripts()) as server:
            config = attached(server.address, list(scripts()), tmp_path, max_concurrent=16)
            engine = LiveSession(config, recorder=Recorder(tmp_path / "live.twrec"), session_dir=tmp_path / "session")
            out = io.StringIO()
            code = await asyncio.wait_for(run_headless(engine, out), DEADLINE)
            return engine, code, out.getvalue()

    return (tmp_path, *asyncio.run(run()))


def by_task(store) -> dict[str, object]:
    return {r.task_data["id"]: r for r in store.rollouts.values()}


def test_each_hostile_value_fails_its_own_run_with_the_reason(live):
    _, engine, code, out = live
    rollouts = by_task(engine.store)
    for name, (_, words) in HOSTILE.items():
        assert rollouts[name].status is Status.FAILED, (name, out)
        assert "a delta could not be applied" in rollouts[name].reason and words in rollouts[name].reason, name
    assert rollouts["good"].status is Status.DONE and rollouts["good"].reward == 1.0
    assert rollouts["reward-null"].status is Status.DONE and rollouts["reward-null"].reward is None
    assert rollouts["deep-array"].status is Status.DONE
    stats = engine.store.stats("remote")
    assert stats.counts[Status.DONE] == 3 and stats.mean_reward == 1.0
    assert code == 1 and "Traceback" not in out
    assert summary_lines(engine)[0].startswith("remote: done; 3 done, 7 failed; mean reward 1.000")


def test_replay_and_open_of_the_recording_end_each_run_the_same_way(live):
    tmp_path, engine, _, _ = live
    assert endings(asyncio.run(replay(tmp_path / "live.twrec")).store) == endings(engine.store)
    opened = OpenedRecording(tmp_path / "live.twrec")
    for key in opened.store.rollouts:
        opened.select(key)
    assert endings(opened.store) == endings(engine.store)


def test_export_leaves_out_only_what_json_cannot_hold(live):
    tmp_path, engine, _, _ = live
    records = export_recording(tmp_path / "live.twrec", tmp_path / "records.jsonl")
    assert records.unwritable == 1  # the 300-deep token array
    # the 1,020-deep delta is kept as it came, deeper than msgpack reads back: skipped, said
    assert "1 damaged record(s) skipped, the first at byte" in records.truncated and "nested deeper than msgpack reads" in records.truncated
    assert records.lines == len((tmp_path / "records.jsonl").read_text().splitlines())
    episodes = export_recording(tmp_path / "live.twrec", tmp_path / "episodes.jsonl", episodes=True)
    written = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert episodes.unwritable == 1 and len(written) == len(engine.store.rollouts) - 1


async def test_the_app_shows_every_run_of_the_recording(live):
    tmp_path, engine, _, _ = live
    app = TracewatchApp(ReplaySession(tmp_path / "live.twrec", speed=0))
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(RolloutsTable)
        await until(pilot, lambda: table.row_count == len(engine.store.rollouts) and app.session.finished)
        for key in engine.store.rollouts:
            table.select(key)
            await until(pilot, lambda key=key: app.selected == key)
            await pilot.press("2", "1")
            # the trace pane follows the selection on a later refresh
            await until(pilot, lambda key=key: app.query_one(TracePane).rollout.key == key, f"{key} in the trace pane")
    assert app.return_code in (0, None)


def test_nesting_is_bounded_at_max_depth_exactly():
    def delta(levels: int) -> dict:
        """A node whose content makes the delta `levels` containers deep."""
        content: object = "x"
        for _ in range(levels - 4):  # the delta, its node list, the node, the message
            content = {"a": content}
        return {"trace": "t", "open": header("t"), "nodes": [{"parent": None, "message": {"role": "user", "content": content}}]}

    EpisodeAssembly().apply(delta(MAX_DEPTH))
    with pytest.raises(AssemblyError, match=f"nested deeper than {MAX_DEPTH} levels"):
        EpisodeAssembly().apply(delta(MAX_DEPTH + 1))
