"""`PrimeRlRun`'s joins and its bounded polls: a live trace and its finished row are one
rollout whichever the run writes first; a trace that never lands is lost (at once when
its episode landed without it, after the landing window otherwise); annotations reach
rows whichever is read first; a poll does a bounded piece of work."""

from __future__ import annotations

import pytest

from tests.support.prime_rl_monitor import FileMonitor, traces_dir
from tests.support.prime_rl_orchestrator import Orchestrator
from tracewatch.core.recordings.prime_rl.episodes import STEP_FROM_DISPATCH, STEP_FROM_SHIP, STEP_UNKNOWN
from tracewatch.core.recordings.prime_rl.layout import find_run
from tracewatch.core.recordings.prime_rl.run import LANDING_SECONDS, PrimeRlRun


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def setup(tmp_path):
    out = tmp_path / "out"
    orchestrator = Orchestrator(FileMonitor(out, "orchestrator"), FileMonitor(out, "trainer"))
    return orchestrator, out, Clock()


def started(orchestrator, task=1, kind="train", step=3):
    rollout = orchestrator.dispatch(kind, step, "gsm8k", task)
    orchestrator.turn(rollout)
    orchestrator.flush()
    return rollout


def land(orchestrator, rollout, delete_first=True):
    """Land `rollout`, its live file deleted before (or after) its record is written."""
    return orchestrator.finish(rollout, reward=1.0, retire_first=delete_first)


def land_unindexed(orchestrator, rollout, out) -> bytes:
    """Land `rollout` (its file deleted first) with its index line held back: the index
    as it was before, the line to write back later."""
    index = traces_dir(out) / "stream.index.jsonl"
    land(orchestrator, rollout)
    held = index.read_bytes()
    index.write_bytes(b"")
    return held


def test_a_trace_whose_row_lands_before_its_file_vanishes_is_one_rollout(setup):
    orchestrator, out, clock = setup
    rollout = started(orchestrator)
    run = PrimeRlRun(find_run(out), clock)
    run.poll()
    land(orchestrator, rollout, delete_first=False)
    changes = run.poll()
    assert changes.landed == [(rollout.trace.id, 0)] and changes.rows == range(0, 1)
    where = run.where(rollout.trace.id)
    assert where.live is not None and where.row == 0 and where.landing is None
    assert run.table.steps()[0][0] == 3 and run.table.steps()[1][0] == STEP_FROM_DISPATCH and run.table.text("task", 0) == "task 1"
    orchestrator.flush()
    changes = run.poll()
    assert [t.trace_id for t in changes.live.vanished] == [rollout.trace.id] and not changes.landed and not run.landing
    assert run.where(rollout.trace.id).row == 0


def test_a_trace_whose_file_vanishes_first_is_landing_until_its_row_comes(setup):
    orchestrator, out, clock = setup
    rollout = started(orchestrator)
    run = PrimeRlRun(find_run(out), clock)
    run.poll()
    held = land_unindexed(orchestrator, rollout, out)
    run.poll()
    assert run.where(rollout.trace.id).landing is not None and run.where(rollout.trace.id).row == -1
    (traces_dir(out) / "stream.index.jsonl").write_bytes(held)
    changes = run.poll()
    assert changes.landed == [(rollout.trace.id, 0)] and run.where(rollout.trace.id).landing is None


def test_a_trace_that_never_lands_is_lost_after_the_window(setup):
    orchestrator, out, clock = setup
    rollout = started(orchestrator)
    run = PrimeRlRun(find_run(out), clock)
    run.poll()
    orchestrator.events.append({"done": rollout.trace.id})  # cancelled: no record
    orchestrator.flush()
    assert not run.poll().lost
    clock.now += LANDING_SECONDS + 1
    assert [t.trace_id for t in run.poll().lost] == [rollout.trace.id]
    assert run.where(rollout.trace.id) == run.where("never seen")


def test_a_trace_that_landed_as_a_relaunch_cleared_the_folder_lands_when_its_row_comes(setup):
    """Its file and the folder went in one poll, its index line a poll behind (a loaded
    box): it was taken for lost at once, and its row then came as a second rollout. A
    cleared trace that never lands is lost after the window, as any other."""
    orchestrator, out, clock = setup
    landing, stale = started(orchestrator), started(orchestrator, task=2)
    run = PrimeRlRun(find_run(out), clock)
    run.poll()
    held = land_unindexed(orchestrator, landing, out)
    live = traces_dir(out) / "live"
    fresh = live.with_name("live.new")
    fresh.mkdir()
    live.rename(live.with_name("live.old"))  # the new process's folder: another inode, for certain
    fresh.rename(live)
    changes = run.poll()
    assert {t.trace_id for t in changes.live.vanished} == {landing.trace.id, stale.trace.id} and not changes.lost
    (traces_dir(out) / "stream.index.jsonl").write_bytes(held)
    changes = run.poll()
    assert changes.landed == [(landing.trace.id, 0)] and not changes.lost
    clock.now += LANDING_SECONDS + 1
    assert [t.trace_id for t in run.poll().lost] == [stale.trace.id]


def test_a_retry_s_discarded_trace_is_lost_when_its_episode_lands(setup):
    orchestrator, out, clock = setup
    rollout = started(orchestrator)
    run = PrimeRlRun(find_run(out), clock)
    run.poll()
    first = rollout.trace.id
    orchestrator.retry(rollout)
    orchestrator.turn(rollout)
    orchestrator.flush()
    run.poll()
    assert run.where(first).landing is not None
    land(orchestrator, rollout)
    changes = run.poll()
    assert [t.trace_id for t in changes.lost] == [first] and changes.landed == [(rollout.trace.id, 0)]


def test_annotations_reach_rows_whichever_is_read_first(setup):
    orchestrator, out, clock = setup
    early, late = started(orchestrator, 1), started(orchestrator, 2)
    land(orchestrator, early)
    orchestrator.ship([early], step=5)
    run = PrimeRlRun(find_run(out), clock)
    run.poll()
    assert run.table.column("ship_step").tolist() == [5] and run.table.column("effective").tolist() == [1]
    land(orchestrator, late)
    run.poll()
    orchestrator.ship([late], step=6)
    changes = run.poll()
    assert changes.annotated.tolist() == [1]
    assert run.table.column("ship_step").tolist() == [5, 6] and run.table.column("advantage").tolist() == [0.5, 0.5]
    step, source = run.table.steps()
    assert step.tolist() == [5, 3] and source.tolist() == [STEP_FROM_SHIP, STEP_FROM_DISPATCH], "the first landed before the run was followed"
    fresh = PrimeRlRun(find_run(out), clock)
    fresh.poll()
    step, source = fresh.table.steps()
    assert step.tolist() == [5, 6] and source.tolist() == [STEP_FROM_SHIP] * 2, "history never seen live: the ship step"
    fresh.open_episode(0)
    assert fresh.table.steps()[0].tolist() == [3, 6], "the record, once read, gives the dispatch step"


def test_a_poll_reads_one_piece_when_its_slice_is_spent(tmp_path):
    index = tmp_path / "traces" / "stream.index.jsonl"
    index.parent.mkdir(parents=True)
    row = b'{"line": 1, "reward": 0.5, "id": "' + b"a" * 32 + b'", "trace_ids": ["' + b"b" * 32 + b'"], "pad": "' + b"x" * 400 + b'"}\n'
    index.write_bytes(row * 5000)
    run = PrimeRlRun(find_run(tmp_path))
    changes = run.poll(slice_seconds=0.0)
    assert changes.more and 0 < len(changes.rows) < 1000
    while run.poll(slice_seconds=0.0).more:
        pass
    assert len(run.table) == 5000


def test_a_replaced_index_joins_the_live_traces_again(setup):
    orchestrator, out, clock = setup
    other, rollout = started(orchestrator, 1), started(orchestrator, 2)
    land(orchestrator, other)
    land(orchestrator, rollout, delete_first=False)
    run = PrimeRlRun(find_run(out), clock)
    run.poll()
    assert run.live.traces[rollout.trace.id].row == 1
    index = traces_dir(out) / "stream.index.jsonl"
    index.write_bytes(index.read_bytes().splitlines(keepends=True)[1])
    changes = run.poll()
    assert changes.restarted and len(run.table) == 1
    assert changes.landed == [(rollout.trace.id, 0)] and run.where(rollout.trace.id).row == 0


def test_history_never_seen_live_gets_its_step_from_its_records_for_eval_progress(tmp_path):
    from collections import Counter

    from tests.support.prime_rl_orchestrator import RunWriter, Script

    writer = RunWriter(tmp_path / "out", Script(episodes=16, concurrent=4, eval_every=2), chunk_bytes=3000, frame_bytes=700)
    writer.run()
    run = PrimeRlRun(find_run(tmp_path / "out"))
    while run.poll().more:
        pass
    landed = Counter(r.step for r in writer.landed if r.kind == "eval")
    before = {p.step: p for p in run.eval_progress()}
    assert all(p.unknown_step == sum(landed.values()) and p.done == 0 for p in before.values())
    assert run.scan_steps(max_rows=3) == 3, "a bounded number a call"
    while run.scan_steps(max_rows=3):
        pass
    after = {p.step: p for p in run.eval_progress()}
    assert {step: p.done for step, p in after.items()} == {step: landed[step] for step in writer.planned}
    assert all(p.unknown_step == 0 and p.expected == writer.planned[p.step] for p in after.values())
    eval_rows = [row for row in range(len(run.table)) if run.table.text("kind", row) == "eval"]
    assert all(run.table.text("task", row) is not None for row in eval_rows)


def test_a_trace_seen_only_as_a_torn_first_line_is_landing_when_its_file_vanishes(setup):
    """A file listed before a whole line of it was written, gone by the next poll: the
    rollout is landing (not nowhere) until its row comes."""
    orchestrator, out, clock = setup
    rollout = started(orchestrator)
    path = traces_dir(out) / "live" / f"{rollout.trace.id}.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole[:30])
    run = PrimeRlRun(find_run(out), clock)
    run.poll()
    assert run.live.traces[rollout.trace.id].trace is None
    index = traces_dir(out) / "stream.index.jsonl"
    land(orchestrator, rollout)
    held = index.read_bytes()
    index.write_bytes(b"")
    run.poll()
    assert run.where(rollout.trace.id).landing is not None, "a gap: the rollout was nowhere"
    index.write_bytes(held)
    assert run.poll().landed == [(rollout.trace.id, 0)]


def test_a_record_with_a_negative_step_is_read_once_and_its_step_stays_unknown(setup, monkeypatch):
    """A finished row whose record says step -1 has no step to give: its record is read
    by the first scan only (every later poll's scan would read it again otherwise)."""
    from tracewatch.core.recordings.prime_rl import chunks

    orchestrator, out, clock = setup
    land(orchestrator, started(orchestrator, task=1, kind="eval", step=-1))
    land(orchestrator, started(orchestrator, task=2, kind="eval", step=4))
    reads: list[int] = []
    record_at = chunks.OpenChunk.record_at

    def counted(self, offset):
        reads.append(offset)
        return record_at(self, offset)

    monkeypatch.setattr(chunks.OpenChunk, "record_at", counted)
    run = PrimeRlRun(find_run(out), clock)
    while run.poll().more:
        pass
    assert run.scan_steps(kind=None) == 1, "only the row whose record holds a step got one"
    assert len(reads) == 2
    for _ in range(5):
        run.poll()
        assert run.scan_steps(kind=None) == 0
    assert len(reads) == 2, f"records read again on later scans: {len(reads) - 2} more reads"
    steps, source = run.table.steps()
    assert steps[1] == 4 and source[0] == STEP_UNKNOWN
