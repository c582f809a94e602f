"""Export of real recordings: the fixture's verifiers 0.4.0 stream recorded through
`Recorder`, rebuilt into episodes, and written as JSONL."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import stat

import msgpack
import pytest
from verifiers.v1.episode import WireEpisode

from tests.support.demo_sessions import demo_variant, write_config
from tests.support.fixture_recording import fixture_stream, record_fixture
from tests.support.polling import eventually
from tests.support.repo import FIXTURE
from tracewatch.cli import main
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRun
from tracewatch.core.recordings.export import ORIGIN_KEY, export_recording, rebuild_episodes
from tracewatch.core.recordings.reader import read_recording
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.recordings.run_dir import open_run
from tracewatch.core.session.config import load_config
from tracewatch.core.wire.assembly import AssemblyError, EpisodeAssembly
from tracewatch.core.wire.episode_json import BYTES_MARKER, episode_json
from tracewatch.launch import main as launch


def assembled_directly() -> dict[str, dict]:
    """Each run's episode as the assembly builds it straight from the fixture."""
    _runs, deltas, replies = fixture_stream()
    assemblies: dict[str, EpisodeAssembly] = {}
    for row in deltas:
        assemblies.setdefault(row["request"], EpisodeAssembly()).apply(row["delta"])
    return {
        f"fixture/{row['request']}": assemblies[row["request"]].finish(row["reply"]["head"], row["reply"]["traces"])
        for row in replies
        if "head" in row["reply"]
    }


def verifiers_episodes() -> dict[str, dict]:
    return {f"fixture/{e['request']}": e["episode"] for e in json.loads((FIXTURE / "episodes.json").read_text())}


def test_rebuilt_episodes_equal_the_assemblys_finish(tmp_path):
    path = tmp_path / "fixture.twrec"
    record_fixture(path)
    rebuilt = rebuild_episodes(read_recording(path))
    expected = assembled_directly()
    assert rebuilt == expected
    assert len(rebuilt) == 6  # `cancel` replied without an episode
    assert rebuilt == verifiers_episodes()  # what verifiers' own client assembled


def test_episode_json_is_what_verifiers_assembled(tmp_path):
    episodes = verifiers_episodes()
    for rollout_id, episode in assembled_directly().items():
        loaded = json.loads(episode_json(episode))
        assert WireEpisode.model_validate(loaded).model_dump(mode="json") == episodes[rollout_id]


def test_episode_json_marks_bytes_as_base64_and_nan_as_null():
    data = bytes(range(256))
    episode = {
        "id": "e",
        "traces": [
            {"nodes": [{"routed_experts": {"__nd__": True, "dtype": "uint8", "shape": [256], "data": data}}]}
        ],
        "score": float("nan"),
        "links": {3: ["x"]},
    }
    loaded = json.loads(episode_json(episode))
    encoded = loaded["traces"][0]["nodes"][0]["routed_experts"]["data"]
    assert list(encoded) == [BYTES_MARKER]
    assert base64.b64decode(encoded[BYTES_MARKER]) == data
    assert loaded["score"] is None
    assert loaded["links"] == {"3": ["x"]}


def test_export_writes_every_record_as_one_json_line(tmp_path):
    path = tmp_path / "fixture.twrec"
    record_fixture(path)
    with Recorder(tmp_path / "bytes.twrec") as rec:
        rec.delta("v/0", {"trace": "t", "nodes": [{"routed_experts": {"__nd__": True, "data": b"\x00\xff"}}]})
    out = tmp_path / "out" / "records.jsonl"
    out.parent.mkdir()

    exported = export_recording(path, out)
    lines, note = exported.lines, exported.truncated
    assert note is None
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    text = out.read_text(encoding="utf-8").splitlines()
    assert len(text) == lines
    rows = [json.loads(line) for line in text]  # each line is valid JSON on its own
    records = list(read_recording(path))
    assert lines == len(records) + 1
    assert rows[0]["format"] == "tracewatch-recording"
    endings = [row.pop("end") for row in rows[1:] if row["k"] == "reply"]
    assert rows[1:] == json.loads(json.dumps(records))  # nothing else changed
    # the fixture was recorded before `end` existed: each reply gains how it ended
    assert [e["status"] for e in endings] == [
        "cancelled" if not r["r"]["success"] else "done" if r["r"]["head"]["ok"] else "failed"
        for r in records if r["k"] == "reply"
    ]
    assert list(out.parent.iterdir()) == [out]  # no partial file left behind

    export_recording(tmp_path / "bytes.twrec", out)  # replaces the earlier export
    row = json.loads(out.read_text().splitlines()[1])
    assert row["d"]["nodes"][0]["routed_experts"]["data"] == {BYTES_MARKER: base64.b64encode(b"\x00\xff").decode()}


def test_the_command_exports_with_the_collector_it_paused_on_again(tmp_path, capsys):
    path = tmp_path / "fixture.twrec"
    record_fixture(path)
    out = tmp_path / "episodes.jsonl"
    try:
        assert launch(["export", str(path), str(out), "--episodes"]) == 0
        assert gc.isenabled()  # `tracewatch` pauses it while it starts; an export has no session to resume it
    finally:
        gc.enable()
        gc.unfreeze()
    assert f"wrote {len(out.read_text().splitlines())} episodes" in capsys.readouterr().out


def test_export_of_episodes_opens_as_a_verifiers_traces_file(tmp_path):
    path = tmp_path / "fixture.twrec"
    record_fixture(path)
    out = tmp_path / "traces.jsonl"
    exported = export_recording(path, out, episodes=True)
    assert (exported.lines, exported.truncated, exported.skipped) == (7, None, [])
    assert exported.partial == {"cancelled": ["fixture/cancel"]}
    episodes = verifiers_episodes()
    run = open_run(out)
    read = list(run.episodes())
    assert run.skipped == []
    announced = [f"fixture/{run['request']}" for run in fixture_stream()[0]]
    whole = [e for e in read if not e.get("partial")]
    assert [e["id"] for e in whole] == [episodes[k]["id"] for k in announced if k in episodes]
    for episode in whole:
        assert episode["env"]["name"] == "fixture" == episode[ORIGIN_KEY]["variant"]
        episode["env"]["name"] = None  # the variant, stamped on; the rest is verifiers' episode
        assert WireEpisode.model_validate(episode).model_dump(mode="json") in episodes.values()


def test_export_of_a_cut_recording_says_where_it_stopped(tmp_path):
    path = tmp_path / "fixture.twrec"
    record_fixture(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])  # inside the last reply
    exported = export_recording(path, tmp_path / "records.jsonl")
    assert "cut at byte" in exported.truncated
    assert exported.lines == len(list(read_recording(path))) + 1
    exported = export_recording(path, tmp_path / "episodes.jsonl", episodes=True)
    assert exported.lines == 7 and "cut at byte" in exported.truncated
    last = f"fixture/{fixture_stream()[2][-1]['request']}"
    assert last in exported.partial["running"]  # its reply was lost: written as far as it got


def test_a_stream_that_lost_a_delta_names_its_rollout(tmp_path):
    path = tmp_path / "fixture.twrec"
    record_fixture(path)
    recording = read_recording(path)
    records = list(recording)
    lost = next(i for i, r in enumerate(records) if r["k"] == "delta" and "nodes" in r["d"])
    damaged = records[:lost] + records[lost + 1 :]
    with pytest.raises(AssemblyError, match=f"rollout {records[lost]['id']}: "):
        rebuild_episodes(damaged)

    # exported, the damaged rollout is written as far as it assembles, saying why; the rest whole
    broken = tmp_path / "lost.twrec"
    broken.write_bytes(b"".join(msgpack.packb(r) for r in [recording.header, *damaged]))
    out = tmp_path / "episodes.jsonl"
    exported = export_recording(broken, out, episodes=True)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert exported.lines == len(lines) == len({r["id"] for r in records if r["k"] == "rollout"})
    partial = {line[ORIGIN_KEY]["rollout"]: line for line in lines if line.get("partial")}
    assert "the server reports" in partial[records[lost]["id"]]["error"]
    assert exported.partial["done"] == [records[lost]["id"]]  # its reply said done; its deltas do not add up


def test_a_rerun_rollout_starts_a_fresh_episode(tmp_path):
    path = tmp_path / "fixture.twrec"
    record_fixture(path)
    records = list(read_recording(path))
    run0 = [r for r in records if r.get("id") == "fixture/run0" and r["k"] in ("request", "delta")]
    failed = [*run0[:3], {"k": "reply", "id": "fixture/run0", "r": {"success": False, "error": "server gone"}}]
    rebuilt = rebuild_episodes(failed + [r for r in records if r.get("id") == "fixture/run0"])
    assert rebuilt == {"fixture/run0": assembled_directly()["fixture/run0"]}


@pytest.mark.slow
def test_export_of_episodes_keeps_variants_and_cancelled_runs_and_says_what_it_skipped(tmp_path, capsys):
    """A live session of two variants, one cancelled mid-run, exported
    with --episodes and opened again: every started rollout is there under its own
    variant, the cancelled one partial; what never started is named as skipped."""
    config = load_config(
        write_config(tmp_path, [demo_variant("stuck", ["stuck", "normal"], max_concurrent=1), demo_variant("other", ["normal"])])
    )
    recording = tmp_path / "session.twrec"
    engine = LiveSession(config, recorder=Recorder(recording), session_dir=tmp_path / "session")

    async def live() -> None:
        await engine.start()
        await eventually(lambda: engine.store.rollouts["stuck/0"].turns > 0, timeout=30, what="the stuck turn")
        await eventually(lambda: engine.store.rollouts["other/0"].status.finished, timeout=30, what="other/0")
        engine.variants["stuck"].cancel()
        await asyncio.wait_for(engine.wait(), 30)
        await engine.shutdown()

    asyncio.run(live())
    out = tmp_path / "episodes.jsonl"
    assert main(["export", str(recording), str(out), "--episodes"]) == 0
    printed = capsys.readouterr().out
    assert "wrote 2 episodes" in printed
    assert "1 cancelled without an episode, written partial (traces so far): stuck/0" in printed
    assert "skipped 1 that never started (nothing to write): stuck/1" in printed

    lines = [json.loads(line) for line in out.read_text().splitlines()]
    origins = {e[ORIGIN_KEY]["rollout"]: e[ORIGIN_KEY] for e in lines}
    assert origins == {
        "stuck/0": {"rollout": "stuck/0", "variant": "stuck", "task_index": 0, "rollout_index": 0, "run": 1, "ended": "cancelled"},
        "other/0": {"rollout": "other/0", "variant": "other", "task_index": 0, "rollout_index": 0, "run": 1, "ended": "done"},
    }
    assert [e.get("partial", False) for e in lines] == [True, False]

    opened = OpenedRun(out)
    assert set(opened.variants) == {"stuck", "other"}
    live_store, store = engine.store, opened.store
    assert set(store.rollouts) == {"stuck/0", "other/0"}
    for key, rollout in store.rollouts.items():
        assert (rollout.variant, rollout.status, rollout.turns) == (
            live_store.rollouts[key].variant, live_store.rollouts[key].status, live_store.rollouts[key].turns,
        )
