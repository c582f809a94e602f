"""A whole prime-rl run folder damaged in generated ways (hypothesis), read through
`PrimeRlRun` to its end and every episode opened: torn and garbage lines, rows
pointing nowhere, chunks vanished or corrupt, links and FIFOs planted, enormous lines,
non-UTF-8 bytes. Each either reads or says why (`TracewatchError`), never a
traceback, never a hang."""

from __future__ import annotations

import os
import shutil

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.prime_rl_monitor import traces_dir
from tests.support.prime_rl_orchestrator import Orchestrator, RunWriter, Script
from tracewatch.core.engine.followed_run import FollowedRun
from tracewatch.core.errors import TracewatchError
from tracewatch.core.recordings.prime_rl.layout import find_run
from tracewatch.core.recordings.prime_rl.run import PrimeRlRun


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    out = tmp_path_factory.mktemp("pristine") / "out"
    RunWriter(out, Script(episodes=10, concurrent=3, ship_every=2), chunk_bytes=3000, frame_bytes=700).run()
    # two rollouts left in flight: their live files stay
    from tests.support.prime_rl_monitor import FileMonitor

    orchestrator = Orchestrator(FileMonitor(out, "orchestrator"), seed=9)
    orchestrator.monitor.live_cleared = True
    for task in range(2):
        orchestrator.turn(orchestrator.dispatch("train", 5, "gsm8k", 100 + task))
    orchestrator.flush()
    return out


def _files(out):
    return sorted(path for path in out.rglob("*") if path.is_file())


DAMAGE = st.sampled_from(["truncate", "garbage", "non-utf8", "delete", "link", "fifo", "huge", "repoint", "corrupt", "wrong-types"])


def damage(path, how, data, rng_bytes, out):
    if how == "truncate":
        path.write_bytes(data[: len(data) * rng_bytes[0] // 256])
    elif how == "garbage":
        cut = len(data) * rng_bytes[0] // 256
        path.write_bytes(data[:cut] + bytes(rng_bytes) + b"\n" + data[cut:])
    elif how == "non-utf8":
        path.write_bytes(data.replace(b'"', b'"\xff', 1))
    elif how == "delete":
        path.unlink()
    elif how in ("link", "fifo"):
        path.unlink()
        if how == "link":
            os.symlink(out.parent / "nowhere" if rng_bytes[0] % 2 else "/etc/passwd", path)
        else:
            os.mkfifo(path)
    elif how == "huge":
        path.write_bytes(data + b'{"x": "' + b"y" * (3 << 20) + b'"}\n')
    elif how == "repoint" and path.name.endswith(".index.jsonl"):
        rows = [orjson.loads(line) for line in data.splitlines() if line.strip()]
        for row in rows:
            row["chunk"], row["offset"] = row.get("chunk", 0) + rng_bytes[0] % 3, row.get("offset", 0) + rng_bytes[1] % 50
        path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    elif how == "corrupt" and path.suffix == ".zst":
        path.write_bytes(data[:20] + bytes(rng_bytes) + data[20 + len(rng_bytes) :])
    elif how == "wrong-types" and path.suffix in (".jsonl", ".json"):
        path.write_bytes(data.replace(b'"', b"[", 3).replace(b"true", b'"yes"'))


def damaged_copy(pristine, tmp_path_factory, damages):
    """A copy of the pristine run with each damage done to the file it picks."""
    out = tmp_path_factory.mktemp("damaged") / "out"
    shutil.copytree(pristine, out, symlinks=True)
    for pick, how, rng_bytes in damages:
        files = [path for path in _files(out) if not path.is_symlink()]
        path = files[pick % len(files)]
        try:
            data = path.read_bytes()
        except OSError:
            continue
        damage(path, how, data, rng_bytes, out)
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damages=st.lists(st.tuples(st.integers(0, 10_000), DAMAGE, st.binary(min_size=2, max_size=24)), min_size=1, max_size=5))
def test_a_damaged_run_reads_to_its_end_and_each_episode_opens_or_says_why(pristine, tmp_path_factory, damages):
    out = damaged_copy(pristine, tmp_path_factory, damages)
    run = PrimeRlRun(find_run(out), landing_seconds=0.0)
    for _ in range(200):
        changes = run.poll()
        if not changes.more:
            break
    assert not changes.more, "the reads did not come to an end"
    for row in range(len(run.table)):
        try:
            opened = run.open_episode(row)
        except TracewatchError as error:
            assert str(error)
        else:
            assert all(isinstance(problem, str) for problem in opened.problems)
    for trace in run.live.traces.values():
        assert trace.error is None or trace.error
    run.eval_progress()
    for key in run.metrics.keys:
        run.metrics.series(key)
    assert traces_dir(out).exists()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damages=st.lists(st.tuples(st.integers(0, 10_000), DAMAGE, st.binary(min_size=2, max_size=24)), min_size=1, max_size=4))
def test_a_damaged_run_opens_as_a_session_every_row_shown_or_said_why(pristine, tmp_path_factory, damages):
    """What `open`, `compare`, `tokens` and `export` hold (`FollowedRun`): a row per
    episode the index names, each opened, or its rollout says why it cannot be."""
    out = damaged_copy(pristine, tmp_path_factory, damages)
    session = FollowedRun(find_run(out), follow=False).snapshot()
    for key in list(session.store.rollouts):
        session.load(key)
        rollout = session.store.rollouts[key]
        assert rollout.status.finished
        if session.row_of(key) is not None and not rollout.traces:
            assert rollout.unavailable or rollout.reason, key  # its record could not be read: said
    for _key, record, problem in session.records():
        assert (record is None) == bool(problem)


@pytest.mark.timeout(120)
def test_a_record_whose_step_is_negative_does_not_hold_the_commands_for_ever(tmp_path):
    """A negative step is a step the table cannot keep (its column's "unknown"): the
    scan for tasks and steps asked for that row again and again, and never returned."""
    from tests.support.prime_rl_monitor import FileMonitor

    monitor = FileMonitor(tmp_path / "out", "orchestrator")
    orchestrator = Orchestrator(monitor)
    rollout = orchestrator.dispatch("train", -5, "gsm8k", 1)
    for _ in range(3):
        orchestrator.turn(rollout)
    orchestrator.finish(rollout, reward=1.0)
    orchestrator.flush()
    monitor.finalize()
    session = FollowedRun(find_run(tmp_path / "out"), follow=False).snapshot()
    (only,) = session.store.rollouts.values()
    assert only.reward == 1.0 and only.step is None
