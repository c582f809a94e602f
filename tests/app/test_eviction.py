"""Finished rollouts leave memory while the session is recorded and read back exactly:
the real app over real demo servers, recording to a real file; each
rollout seen whole before anything left is seen again after it came back."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

import pytest

from tests.support.app_screen import notices, open_side_by_side, screen_text, select
from tests.support.demo_sessions import demo_variant, write_config
from tests.support.polling import eventually, until
from tracewatch.core.engine.headless import summary_lines
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.recordings import recorder as recorder_module
from tracewatch.core.recordings.eviction import TracesUnavailable
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.compare import compare_store
from tracewatch.core.session.config import load_config
from tracewatch.core.session.rollout import Rollout
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.table.rollouts_table import COLUMN_KEYS

LIVE = 90.0
"""How long the demo servers may take to play every rollout on a loaded machine."""
EVERYTHING = 1 << 40
"""A budget nothing passes: every finished rollout stays in memory."""


def recorded_engine(tmp_path: Path, *variants: str) -> LiveSession:
    config = load_config(write_config(tmp_path, list(variants)))
    return LiveSession(config, recorder=Recorder(tmp_path / "live.twrec"), session_dir=tmp_path / "session")


def every_kind(tmp_path: Path) -> LiveSession:
    """Rollouts that end done, failed, retried (a discarded trace) and with two traces."""
    return recorded_engine(
        tmp_path,
        demo_variant("baseline", ["normal", "failing", "multi-agent"]),
        demo_variant("candidate", ["retried", "transient", "normal"]),
    )


def finished(engine: LiveSession) -> bool:
    rollouts = engine.store.rollouts.values()
    return bool(rollouts) and all(r.status.finished for r in rollouts) and all(v.state.value == "done" for v in engine.variants.values())


def held(rollout: Rollout) -> dict[str, Any]:
    """Everything the store holds of a rollout's traces, decoded, and its episode."""
    return {
        "traces": {
            tid: (list(t.nodes), [t.call(i) for i in range(len(t.record["calls"]))], t.record, t.turns, t.calls_by_node, t.failed_calls)
            for tid, t in rollout.traces.items()
        },
        "record": rollout.record,
    }


async def seen(pilot: Any, app: TracewatchApp, key: str, exports: Path) -> dict[str, Any]:
    """The rollout selected in the app: each of its traces' transcript lines (through
    the trace switcher), its exported episode's bytes and what the store holds."""
    await select(pilot, key)
    pane, rollout = app.trace_pane, app.store.rollouts[key]
    assert rollout.traces, f"{key} shows no trace: {rollout.unavailable}"
    lines = {}
    for trace_id, trace in rollout.traces.items():
        if pane.trace_id != trace_id:
            # a switcher just mounted has no options to pick from until it has composed
            switcher = await until(pilot, lambda: pane.switcher if pane.switcher is not None and pane.switcher.is_mounted else None)
            switcher.value = trace_id
        await until(pilot, lambda trace=trace: pane.transcript._state is trace and pane.transcript._lines)
        lines[trace_id] = list(pane.transcript._lines)
    exported = app.session.export_episode(key, exports).read_bytes()
    return {"lines": lines, "export": exported, "held": held(rollout)}


def table_cells(app: TracewatchApp) -> dict[str, dict[str, str]]:
    return {key: {column: app.table.cell_text(key, column) for column in COLUMN_KEYS} for key in app.store.rollouts}


async def test_a_rollout_that_left_memory_reads_back_exactly_as_it_was_shown(tmp_path: Path) -> None:
    engine = every_kind(tmp_path)
    assert engine.eviction is not None
    engine.eviction.budget = EVERYTHING
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: finished(engine), "every rollout finished", timeout=LIVE)
        keys = list(engine.store.rollouts)
        before = {key: await seen(pilot, app, key, tmp_path / "before") for key in keys}
        cells, summary = table_cells(app), summary_lines(engine)
        comparison = compare_store(engine.store)
        assert not engine.eviction.evicted

        engine.eviction.budget = 0
        last = app.selected
        await until(pilot, lambda: engine.eviction.evicted == set(keys) - {last}, "all but the selected rollout left memory")
        assert all(not engine.store.rollouts[key].traces and engine.store.rollouts[key].record is None for key in engine.eviction.evicted)
        assert engine.eviction.held == {last: engine.eviction.held_bytes}
        # what the table, the headless summary and compare show reads the same without them
        assert table_cells(app) == cells
        assert summary_lines(engine) == summary
        assert compare_store(engine.store) == comparison

        for key in keys:
            assert await seen(pilot, app, key, tmp_path / "after") == before[key], key
        assert table_cells(app) == cells
        await engine.shutdown()


async def test_a_rollout_whose_recording_is_gone_says_why_and_exports_nothing(tmp_path: Path) -> None:
    engine = recorded_engine(tmp_path, demo_variant("baseline", ["normal", "normal"]))
    assert engine.eviction is not None
    engine.eviction.budget = 0
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await until(pilot, lambda: finished(engine) and app.selected == "baseline/0", timeout=LIVE)
        key = "baseline/1"
        await until(pilot, lambda: engine.eviction.evicted == {key}, "the rollout not selected left memory")
        assert engine.recording_path is not None
        engine.recording_path.unlink()
        app.table.select(key)
        await until(pilot, lambda: app.trace_pane.rollout is engine.store.rollouts[key])
        rollout = engine.store.rollouts[key]
        assert rollout.unavailable is not None and "No such file" in rollout.unavailable and "live.twrec" in rollout.unavailable
        await until(pilot, lambda: any("cannot be shown" in notice and "No such file" in notice for notice in notices(app)))
        assert "left memory" in str(app.trace_pane._title_line.render())
        assert rollout.turns > 0 and rollout.status.value == "done"  # its row keeps its summary
        app.clear_notifications()
        await pilot.press("2")  # the timing tab (the trace's title now hidden) says why too
        await until(pilot, lambda: "No such file" in screen_text(app), "the timing tab giving the reason")
        assert "select a rollout" not in screen_text(app)
        await pilot.press("1")
        with pytest.raises(TracesUnavailable, match="No such file"):
            engine.export_episode(key)
        await pilot.press("e")
        await until(pilot, lambda: any("Export failed" in notice and "No such file" in notice for notice in notices(app)))
        await engine.shutdown()


async def test_a_damaged_recording_is_named_not_shown_wrong(tmp_path: Path) -> None:
    engine = recorded_engine(tmp_path, demo_variant("baseline", ["normal", "normal"]))
    assert engine.eviction is not None
    engine.eviction.budget = 0
    await engine.start()
    await asyncio.wait_for(engine.wait(), LIVE)
    await until_evicted(engine, {"baseline/0", "baseline/1"})
    assert engine.recording_path is not None
    data = bytearray(engine.recording_path.read_bytes())
    spans = engine.recorder.spans_on_disk("baseline/0")
    middle = spans.offsets[len(spans.offsets) // 2]
    data[middle : middle + 8] = b"\xc1" * 8  # never valid msgpack
    engine.recording_path.write_bytes(data)
    engine.select("baseline/0")
    assert "no longer holds it as recorded" in (engine.store.rollouts["baseline/0"].unavailable or "")
    assert not engine.store.rollouts["baseline/0"].traces
    engine.select("baseline/1")
    assert engine.store.rollouts["baseline/1"].traces and engine.store.rollouts["baseline/1"].unavailable is None
    await engine.shutdown()


async def until_evicted(engine: LiveSession, keys: set[str]) -> None:
    eviction = engine.eviction
    assert eviction is not None
    await eventually(lambda: eviction.evicted == keys, what=lambda: f"{sorted(keys)} evicted; evicted so far: {sorted(eviction.evicted)}")


async def test_rollouts_side_by_side_stay_while_shown(tmp_path: Path) -> None:
    engine = recorded_engine(
        tmp_path,
        demo_variant("baseline", ["normal"]),
        demo_variant("candidate", ["normal"]),
    )
    assert engine.eviction is not None
    engine.eviction.budget = 0
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: finished(engine), timeout=LIVE)
        _, screen, left, right = await open_side_by_side(app, pilot, 2, "enter")
        shown = {left.rollout.key, right.rollout.key}
        assert shown == {"baseline/0", "candidate/0"}
        await until(pilot, lambda: left.transcript._lines and right.transcript._lines)
        drawn = (list(left.transcript._lines), list(right.transcript._lines))
        engine.eviction.run(engine.in_view)  # a pass while they are shown: both stay
        assert not shown & engine.eviction.evicted
        await pilot.press("escape")
        await until(pilot, lambda: shown - {app.selected} <= engine.eviction.evicted, "what no view shows left memory")
        _, screen, left, right = await open_side_by_side(app, pilot, 2, "enter")
        await until(pilot, lambda: (list(left.transcript._lines), list(right.transcript._lines)) == drawn)
        await engine.shutdown()


async def test_nothing_leaves_memory_when_recording_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, data: bytes | bytearray) -> tuple[int, OSError]:
        return 0, OSError(errno.ENOSPC, "No space left on device")

    engine = recorded_engine(tmp_path, demo_variant("baseline", ["normal", "normal"]))
    assert engine.eviction is not None
    engine.eviction.budget = 0
    monkeypatch.setattr(recorder_module, "_write_some", full)
    await engine.start()
    await asyncio.wait_for(engine.wait(), LIVE)
    assert engine.recorder.error is not None
    assert engine.eviction.run(set()) == 0
    assert all(r.traces for r in engine.store.rollouts.values())
    await engine.shutdown()


def test_an_unrecorded_session_keeps_every_rollout(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, [demo_variant("baseline", ["normal"])]))
    assert LiveSession(config, session_dir=tmp_path / "session").eviction is None
