"""A recorded live session replays to the same store; a cut file replays to its cut;
a finished verifiers run opens with every episode."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest
from verifiers.v1.cli.output import save_config
from verifiers.v1.configs.cli.eval import EvalConfig
from verifiers.v1.episode import WireEpisode
from verifiers.v1.utils.trace_store import write_episode

from tests.support.demo_sessions import demo_variant, write_config
from tests.support.polling import eventually, wait_until
from tests.support.tui_standin import fixture_episodes
from tracewatch.core.engine import replay
from tracewatch.core.engine.headless import run_headless
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording, OpenedRun
from tracewatch.core.engine.replay import ReplaySession
from tracewatch.core.recordings.file_format import RecordingError
from tracewatch.core.recordings.index import RecordingIndex
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.config import load_config
from tracewatch.core.session.rollout_filter import RowFilter
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import RolloutStore


def snapshot(store: RolloutStore) -> dict:
    """What a user sees of each rollout, and the exact episode behind it."""
    view = {}
    for key, r in store.rollouts.items():
        view[key] = {
            "status": r.status,
            "reason": r.reason,
            "turns": r.turns,
            "tokens": r.tokens,
            "reward": r.reward,
            "errors": r.errors,
            "phase": r.phase,
            "traces": {tid: (len(t.nodes), len(t.pending), t.timing) for tid, t in r.traces.items()},
            "record": r.record,
        }
    return view


@pytest.fixture
def recorded(tmp_path) -> tuple[Path, dict]:
    config = load_config(
        write_config(
            tmp_path,
            [demo_variant("baseline", ["normal", "failing", "multi-agent"]), demo_variant("candidate", ["retried", "transient"])],
        )
    )
    path = tmp_path / "session.twrec"
    engine = LiveSession(config, recorder=Recorder(path, meta={"test": True}), session_dir=tmp_path / "session")

    async def live() -> None:
        await engine.start()
        await asyncio.wait_for(engine.wait(), 90)
        await engine.shutdown()

    asyncio.run(live())
    return path, snapshot(engine.store)


def replayed(path: Path) -> ReplaySession:
    session = ReplaySession(path, speed=0)

    async def play() -> None:
        await session.start()
        await asyncio.wait_for(session.wait(), 30)

    asyncio.run(play())
    return session


def test_replay_gives_the_live_store(recorded):
    path, live = recorded
    session = replayed(path)
    assert session.truncated is None
    assert snapshot(session.store) == live
    assert {r.status for r in session.store.rollouts.values()} == {Status.DONE, Status.FAILED}
    assert {v.state.value for v in session.variants.values()} == {"done"}
    assert any(e.kind == "sigterm" for v in session.variants.values() for e in v.escalation)


def test_a_large_replay_starts_before_its_records_are_counted(tmp_path, monkeypatch):
    """Counting a recording's records and times is a pass over the whole file (a
    gigabyte takes seconds): a replay starts without waiting for it, and its position
    says the count, the same as the index's, once the pass is done. (The pass is held
    until the replay has started: on a loaded box a free-running one could end first.)"""
    path = tmp_path / "large.twrec"
    recorder = Recorder(path, meta={"test": True})
    for n in range(40):
        recorder.rollout(f"v/{n}", "v", n, {"name": f"task {n}"}, 0, t=1000.0 + n)
        recorder.request(f"v/{n}", f"req-{n}", t=1000.0 + n)
        recorder.delta(f"v/{n}", {"trace": "t", "open": {"id": "t"}}, t=1000.5 + n)
        for turn in range(100):
            recorder.delta(f"v/{n}", {"trace": "t", "set": {"note": "x" * 4_000, "turn": turn}}, t=1000.5 + n + turn / 1000)
    recorder.close()
    held, span = threading.Event(), replay.recording_span
    monkeypatch.setattr(replay, "recording_span", lambda path: held.wait(30) and span(path))

    session = ReplaySession(path, speed=0)
    started = session.position()
    held.set()
    index = RecordingIndex.build(path)

    assert (started.total, started.duration) == (None, None), "the replay waited for a pass over the whole file"
    wait_until(lambda: session.total is not None, timeout=60)
    assert session.total == index.records == 40 * 103
    at = session.position()
    assert (at.total, at.duration) == (index.records, pytest.approx(39.5 + 99 / 1000))


def test_a_cut_recording_replays_up_to_its_cut(recorded):
    path, live = recorded
    data = path.read_bytes()
    cut = path.with_name("cut.twrec")
    cut.write_bytes(data[: len(data) * 2 // 3])
    session = replayed(cut)
    assert session.truncated and "cut at byte" in session.truncated
    assert 0 < len(session.store.rollouts) <= len(live)
    finished = [k for k, r in session.store.rollouts.items() if r.status.finished]
    for key in finished:
        assert snapshot(session.store)[key] == live[key]
    assert len(finished) < len(live)


def test_another_format_is_a_clear_error(tmp_path):
    bogus = tmp_path / "notes.twrec"
    bogus.write_text("hello, not a recording\n")
    with pytest.raises(RecordingError, match="notes.twrec"):
        ReplaySession(bogus)


def test_headless_replay_prints_the_summary(recorded, capsys):
    path, live = recorded
    session = ReplaySession(path, speed=0)
    code = asyncio.run(run_headless(session, out=sys.stdout))
    out = capsys.readouterr().out
    assert code == 1  # the failing scenario failed, as it did live
    assert "baseline: done" in out and "candidate: done" in out
    assert out.count(" done · reward") == sum(v["status"] is Status.DONE for v in live.values())


async def test_a_replay_is_fast_at_speed_0_or_seeking_while_it_plays(recorded):
    path, live = recorded
    paced = ReplaySession(path, speed=1.0)
    assert not paced.fast
    paced.seek(next(iter(live)))
    assert paced.fast
    paced.toggle_pause()
    assert not paced.fast
    fastest = ReplaySession(path, speed=0)
    assert fastest.fast
    await fastest.start()
    await fastest.wait()
    assert fastest.finished and not fastest.fast


def test_a_finished_verifiers_run_opens_with_every_episode(tmp_path):
    out = tmp_path / "outputs" / "run"
    save_config(EvalConfig(model="fake-model"), out)
    episodes = fixture_episodes()
    for episode in episodes:
        write_episode(out, WireEpisode.model_validate(episode))
    session = OpenedRun(out)
    rollouts = list(session.store.rollouts.values())
    assert len(rollouts) == len(episodes)
    for rollout, episode in zip(rollouts, episodes):
        assert [t for t in rollout.traces] == [t["id"] for t in episode["traces"]]
        assert rollout.turns == sum(sum(1 for n in t["nodes"] if n["sampled"]) for t in episode["traces"])
        assert rollout.status is (Status.FAILED if any(t["errors"] for t in episode["traces"]) else Status.DONE)
        assert rollout.primary.timing == episode["traces"][0]["timing"]
    assert session.readonly_reason and "nothing is running" in session.readonly_reason


def test_an_opened_recording_loads_a_rollout_only_when_selected(recorded):
    path, live = recorded
    session = OpenedRecording(path)
    store = session.store
    assert list(store.rollouts) == list(live)
    for key, rollout in store.rollouts.items():
        assert not rollout.traces, "nothing is loaded before it is selected"
        assert rollout.status is live[key]["status"]
        assert rollout.reward == live[key]["reward"]
    key = next(k for k, v in live.items() if v["status"] is Status.DONE)
    session.select(key)
    assert session.loaded == {key}
    assert snapshot(store)[key] == live[key]
    assert all(not r.traces for k, r in store.rollouts.items() if k != key)


def test_an_opened_recordings_rows_read_the_same_before_a_rollout_is_loaded(recorded):
    """The index carries what a row shows (phase, turns, tokens,
    reward, elapsed, errors), so unselected rows are right and a filter finds them."""
    path, live = recorded
    session = OpenedRecording(path)
    store = session.store
    now = session.clock()

    def rows() -> dict[str, tuple]:
        return {
            key: (r.status, r.phase, r.turns, r.tokens, r.reward, r.errors, round(r.elapsed(now), 6))
            for key, r in store.rollouts.items()
        }

    before = rows()
    assert {key: row[1:4] + row[5:6] for key, row in before.items()} == {
        key: (v["phase"], v["turns"], v["tokens"], v["errors"]) for key, v in live.items()
    }
    for phase in {row[1] for row in before.values()}:
        wanted = RowFilter.parse(f"phase:{phase}")
        shown = {key for key, r in store.rollouts.items() if wanted.matches(r, now, store.is_stalled)}
        assert shown >= {key for key, row in before.items() if row[1] == phase}
    for key in list(store.rollouts):
        session.select(key)
    assert rows() == before


def test_a_cancelled_variant_replays_cancelled(tmp_path):
    """Rollouts a cancel ended, queued ones included, are in the recording as ended."""
    config = load_config(write_config(tmp_path, [demo_variant("stuck", ["stuck", "normal", "normal"], max_concurrent=1)]))
    path = tmp_path / "cancelled.twrec"
    engine = LiveSession(config, recorder=Recorder(path), session_dir=tmp_path / "session")

    async def live() -> None:
        await engine.start()
        await eventually(lambda: engine.store.rollouts["stuck/0"].turns > 0, timeout=30, what="the stuck turn")
        engine.variants["stuck"].cancel()
        await asyncio.wait_for(engine.wait(), 30)
        await engine.shutdown()

    asyncio.run(live())
    live_view = snapshot(engine.store)
    assert {v["status"] for v in live_view.values()} == {Status.CANCELLED}
    assert snapshot(replayed(path).store) == live_view
    opened = OpenedRecording(path)
    listed = {key: r.ending for key, r in opened.store.rollouts.items()}
    assert listed == {key: r.ending for key, r in engine.store.rollouts.items()}, "listed as they ended, before loading"
    for key in listed:
        opened.select(key)
        assert opened.store.rollouts[key].ending == listed[key]
