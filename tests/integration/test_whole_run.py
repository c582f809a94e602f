"""The run as a whole from a real demo recording: each rollout's times and the run's
series read the same live, replayed and opened, and its trace-events export follows
the format's rules."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.demo_sessions import demo_variant, write_config
from tracewatch.cli import main
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.engine.replay import ReplaySession
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.recordings.trace_events import write_trace_events
from tracewatch.core.session.config import load_config
from tracewatch.core.session.store import RolloutStore

T0 = 1_700_000_000.0

TIME_SLACK = 0.5
"""The recorder stamps a record with its own clock call, a moment after the store's."""


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RolloutStore, Path]:
    """A live demo session of two variants (a normal, a failing and a retried rollout),
    recorded to its end: the live store and the recording."""
    tmp_path = tmp_path_factory.mktemp("demo")
    config = load_config(
        write_config(
            tmp_path,
            [demo_variant("base", ["normal", "failing"], max_concurrent=1), demo_variant("cand", ["normal", "retried"])],
        )
    )
    recording = tmp_path / "session.twrec"
    engine = LiveSession(config, recorder=Recorder(recording), session_dir=tmp_path / "session")

    async def live() -> None:
        await engine.start()
        await asyncio.wait_for(engine.wait(), 120)
        await engine.shutdown()

    asyncio.run(live())
    return engine.store, recording


def _totals(store: RolloutStore) -> dict[str, tuple]:
    series = store.series
    columns = {v: series.columns(v, series.first - 1, series.last + 1, 1)[0] for v in store.variants}
    return {v: (c.sums.done, c.sums.failed, c.sums.cancelled, c.sums.tokens, c.sums.rewarded, round(c.sums.reward_sum, 9), c.waiting, c.running) for v, c in columns.items()}


def test_times_and_series_read_the_same_live_replayed_and_opened(demo_run):
    live, recording = demo_run
    replay = ReplaySession(recording, speed=0)
    while replay.step():
        pass
    opened = OpenedRecording(recording)
    assert {r.status for r in live.rollouts.values()} >= {"done", "failed"}
    totals = _totals(live)
    assert totals["base"][:3] == (1, 1, 0) and totals["base"][6:] == (0, 0), totals
    for store in (replay.store, opened.store):
        assert _totals(store) == totals
        for key, rollout in live.rollouts.items():
            other = store.rollouts[key]
            assert other.status == rollout.status
            for mine, theirs in ((rollout.created_at, other.created_at), (rollout.started_at, other.started_at), (rollout.ended_at, other.ended_at)):
                assert abs(mine - theirs) < TIME_SLACK, key
            assert other.times.spans == rollout.times.spans, key
            assert (other.times.model, other.times.harness) == (rollout.times.model, rollout.times.harness)
    for key, rollout in live.rollouts.items():
        assert list(replay.store.rollouts[key].times.call_intervals()) == list(rollout.times.call_intervals())
        assert len(rollout.times.calls) >= 2, "every demo rollout called the model"


def check_trace_events(document: dict) -> list[dict]:
    """The Trace Event format's rules, as Perfetto and chrome://tracing read a JSON
    object trace: `traceEvents` a list of events each with a `ph`; a complete slice
    (X) has a name, numeric ts and dur >= 0, pid and tid; metadata names every process
    and thread that holds a slice; the slices of one track nest (each inside the one
    open under it, or after it ends). Returns the slices."""
    events = document["traceEvents"]
    assert isinstance(events, list) and document.get("displayTimeUnit") in (None, "ms", "ns")
    slices, names = [], {}
    for event in events:
        assert event["ph"] in ("X", "M", "i"), event
        if event["ph"] == "X":
            for key in ("name", "ts", "dur", "pid", "tid"):
                assert key in event, (key, event)
            assert all(isinstance(event[k], (int, float)) and not isinstance(event[k], bool) for k in ("ts", "dur", "pid", "tid")), event
            assert event["dur"] >= 0, event
            slices.append(event)
        elif event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"), event
            names[(event["name"], event["pid"], event["tid"] if event["name"].startswith("thread") else 0)] = event["args"]
        else:
            assert event["s"] in ("g", "p", "t") and isinstance(event["ts"], (int, float)), event
    tracks: dict[tuple, list[dict]] = {}
    for event in slices:
        assert ("process_name", event["pid"], 0) in names and ("thread_name", event["pid"], event["tid"]) in names, event
        tracks.setdefault((event["pid"], event["tid"]), []).append(event)
    for track in tracks.values():
        open_ends: list[float] = []
        for event in sorted(track, key=lambda e: (e["ts"], -e["dur"])):
            while open_ends and event["ts"] >= open_ends[-1] and not (event["dur"] == 0 and event["ts"] == open_ends[-1]):
                open_ends.pop()
            end = event["ts"] + event["dur"]
            assert not open_ends or end <= open_ends[-1] + 1e-6, f"{event} overlaps its parent ending at {open_ends[-1]}"
            open_ends.append(end)
    return slices


def test_trace_events_export_of_a_demo_recording_follows_the_formats_rules(demo_run, tmp_path, capsys):
    live, recording = demo_run
    out = tmp_path / "run.json"
    assert main(["export", str(recording), str(out), "--trace-events"]) == 0
    assert f"wrote {len(live.rollouts)} rollouts" in capsys.readouterr().out
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    document = json.loads(out.read_text())
    slices = check_trace_events(document)
    processes = {e["args"]["name"]: e["pid"] for e in document["traceEvents"] if e["name"] == "process_name"}
    assert set(processes) == set(live.variants)
    for key, rollout in live.rollouts.items():
        pid = processes[rollout.variant]
        (whole,) = [s for s in slices if s["name"] == "rollout" and s["args"]["rollout"] == key]
        assert whole["pid"] == pid
        assert whole["args"]["ending"] == rollout.status.value and whole["args"]["reward"] == rollout.reward
        assert whole["args"]["task"] == rollout.task_label
        track = [s for s in slices if (s["pid"], s["tid"]) == (pid, whole["tid"])]
        assert [s["name"] for s in track if s["cat"] == "phase"] == [span.phase for span in rollout.times.spans]
        assert sum(s["cat"] == "model" for s in track) == len(rollout.times.calls) // 2
        agent = next(s for s in track if s["name"] == "agent")
        assert abs(agent["dur"] / 1e6 - rollout.times.agent_seconds) < 1e-3
    failed = [e for e in document["traceEvents"] if e["ph"] == "i"]
    assert {e["name"] for e in failed} == {"failed"}


@st.composite
def hostile_timing(draw: st.DrawFn) -> dict:
    t = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5).map(lambda n: T0 + n), st.none(), st.text(max_size=2))
    span = st.fixed_dictionaries({"start": t, "end": t})
    return {phase: draw(span) for phase in ("boot", "setup", "agent", "finalize", "scoring") if draw(st.booleans())}


@given(st.lists(st.tuples(hostile_timing(), st.lists(st.tuples(st.integers(-5, 5), st.integers(-5, 5)), max_size=4)), min_size=1, max_size=4))
def test_trace_events_nest_whatever_times_a_trace_reports(tmp_path_factory, rollouts):
    store = RolloutStore(clock=lambda: T0)
    for number, (timing, calls) in enumerate(rollouts):
        key = f"v/{number}"
        store.add_rollout("v", number, {}, key=key)
        store.started(key, "r", T0 + 1)
        delta = {"trace": "t", "open": {"id": "t"}, "calls": [{"node": None, "time": {"start": T0 + a, "end": T0 + b}} for a, b in calls]}
        store.apply_delta(key, delta, T0 + 2)
        store.rollouts[key].assembly.traces["t"]["timing"] = timing  # as a damaged file could hold it
        store.rollouts[key].traces["t"].revision += 1
        store.failed(key, "x", t=T0 + 3)
    out = tmp_path_factory.mktemp("events") / "run.json"
    written = write_trace_events(store.rollouts.values(), out)
    assert written.rollouts == len(rollouts)
    check_trace_events(json.loads(out.read_text()))
