"""Live traces followed: each `live/<trace_id>.jsonl` folded as prime-rl's orchestrator
writes it (verifiers' own deltas, blank lines between them, the dispatch identity on the
first), a torn line waiting, a file starting over, placeholders; and every hostile file
(a link, a FIFO, garbage, wrong types, an enormous line, non-UTF-8) one row with a word,
never a traceback, never an open of what must not be opened."""

from __future__ import annotations

import os
import sys
import threading

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from verifiers.v1.serve.delta import EpisodeAssembly as VerifiersAssembly

from tests.support.prime_rl_monitor import FileMonitor, traces_dir
from tests.support.prime_rl_orchestrator import Orchestrator
from tracewatch.core.recordings.prime_rl.live import Dispatch, LiveFollower

OPENED: list[str] = []
_WATCHING = threading.local()


def _audit(event: str, args: tuple) -> None:
    if event == "open" and getattr(_WATCHING, "on", False):
        OPENED.append(os.fsdecode(args[0]) if isinstance(args[0], (str, bytes, os.PathLike)) else str(args[0]))


sys.addaudithook(_audit)


class Watch:
    """Every file this thread opens while inside."""

    def __enter__(self) -> list[str]:
        OPENED.clear()
        _WATCHING.on = True
        return OPENED

    def __exit__(self, *exc: object) -> None:
        _WATCHING.on = False


@pytest.fixture
def run(tmp_path):
    out = tmp_path / "out"
    orchestrator = Orchestrator(FileMonitor(out, "orchestrator"))
    live = traces_dir(out) / "live"
    return orchestrator, live, LiveFollower(live, live / "pending")


def streamed(orchestrator, turns=2, kind="train"):
    rollout = orchestrator.dispatch(kind, 4, "gsm8k", 3)
    deltas = []
    for _ in range(turns):
        orchestrator.turn(rollout)
    deltas = [event["delta"] for event in orchestrator.events if "delta" in event]
    orchestrator.flush()
    return rollout, deltas


def test_a_live_file_folds_to_what_verifiers_assembles_from_the_same_deltas(run):
    orchestrator, live, follower = run
    rollout, deltas = streamed(orchestrator, turns=3)
    text = (live / f"{rollout.trace.id}.jsonl").read_bytes()
    assert b"\n\n" in text and text.endswith(b"\n\n"), "prime-rl's blank line after every delta"
    changes = follower.poll()
    (trace,) = changes.changed
    reference = VerifiersAssembly()
    for delta in orjson.loads(orjson.dumps(deltas, default=str, option=orjson.OPT_NON_STR_KEYS)):
        reference.apply(delta)
    expected = reference.traces[rollout.trace.id]
    assert list(trace.trace["nodes"]) == expected["nodes"] and trace.trace["timing"] == expected["timing"]
    assert trace.dispatch == Dispatch(rollout.dispatch_id, "train", "gsm8k", rollout.group, "task 3", 4, 4, rollout.started)
    assert "dispatch" not in trace.trace
    assert trace.stage == "running" and trace.lines == len(deltas) and trace.error is None


def test_a_torn_last_line_waits_for_the_rest_and_blank_lines_are_optional(tmp_path, run):
    orchestrator, live, follower = run
    rollout, _ = streamed(orchestrator)
    path = live / f"{rollout.trace.id}.jsonl"
    lines = [line for line in path.read_bytes().split(b"\n") if line]
    path.write_bytes(lines[0] + b"\n" + lines[1][:25])
    follower.poll()
    assert follower.traces[rollout.trace.id].lines == 1
    with open(path, "ab") as file:
        file.write(lines[1][25:] + b"\n")
    assert follower.poll().changed and follower.traces[rollout.trace.id].lines == 2
    assert not follower.poll(), "nothing new, nothing changed"


def test_a_file_that_shrank_is_a_new_attempt_folded_from_its_start(run):
    orchestrator, live, follower = run
    rollout, _ = streamed(orchestrator, turns=3)
    path = live / f"{rollout.trace.id}.jsonl"
    follower.poll()
    first = follower.traces[rollout.trace.id]
    path.write_bytes(path.read_bytes().split(b"\n\n")[0] + b"\n")
    follower.poll()
    again = follower.traces[rollout.trace.id]
    assert again.attempt == first.attempt + 1 and again.lines == 1 and again.error is None


def test_placeholders_come_and_go_and_one_whose_trace_streams_is_not_shown(run):
    orchestrator, live, follower = run
    waiting = orchestrator.dispatch("eval", 2, "math", 9)
    held = [event for event in orchestrator.events if "delta" in event]
    orchestrator.events = [event for event in orchestrator.events if "pending" in event]
    orchestrator.flush()
    (live / "pending" / "half.json.tmp").write_bytes(b"{")
    changes = follower.poll()
    assert [p.dispatch_id for p in changes.placed] == [waiting.dispatch_id]
    assert changes.placed[0].dispatch.kind == "eval" and changes.placed[0].dispatch.step == 2
    assert [p.dispatch_id for p in follower.visible_placeholders()] == [waiting.dispatch_id]
    orchestrator.turn(waiting)
    orchestrator.events = held + [event for event in orchestrator.events if "delta" in event]
    orchestrator.flush()  # the trace streams; its placeholder is not removed yet
    follower.poll()
    assert follower.visible_placeholders() == [] and waiting.dispatch_id in follower.placeholders
    orchestrator.events = [{"dispatched": waiting.dispatch_id}, {"done": waiting.trace.id}]
    orchestrator.flush()
    changes = follower.poll()
    assert [p.dispatch_id for p in changes.unplaced] == [waiting.dispatch_id]
    assert [t.trace_id for t in changes.vanished] == [waiting.trace.id] and follower.traces == {}


def test_a_dispatch_without_an_id_and_with_wrong_types_reads_what_it_can(run):
    orchestrator, live, follower = run
    rollout, _ = streamed(orchestrator)
    path = live / f"{rollout.trace.id}.jsonl"
    first, rest = path.read_bytes().split(b"\n", 1)
    line = orjson.loads(first)
    line["dispatch"] = {"kind": "train", "env": 5, "step": "7", "started": True}
    path.write_bytes(orjson.dumps(line) + b"\n" + rest)
    follower.poll()
    assert follower.traces[rollout.trace.id].dispatch == Dispatch(None, "train", None, None, None, None, None, None)


def test_nothing_changed_costs_a_stat_per_file_and_opens_no_file(run):
    orchestrator, live, follower = run
    for task in range(5):
        orchestrator.turn(orchestrator.dispatch("train", 1, "gsm8k", task))
    orchestrator.flush()
    follower.poll()
    follower.poll()  # the folder may have been listed within the clock's granularity
    with Watch() as opened:
        changes = follower.poll()
    assert not changes and [name for name in opened if name.endswith((".jsonl", ".json"))] == []


def test_a_planted_link_and_fifo_are_refused_and_never_opened(tmp_path, run):
    orchestrator, live, follower = run
    streamed(orchestrator)
    secret = tmp_path / "secret.jsonl"
    secret.write_bytes(b'{"trace": "x"}\n')
    os.symlink(secret, live / "linked.jsonl")
    os.mkfifo(live / "fifo.jsonl")
    (live / "pending" / "fifo.json").unlink(missing_ok=True)
    os.mkfifo(live / "pending" / "fifo.json")
    with Watch() as opened:
        follower.poll()
        follower.poll()
    assert not [name for name in map(os.path.basename, opened) if name.startswith(("linked", "fifo", "secret"))], opened
    assert "symbolic link" in follower.traces["linked"].error
    assert "FIFO" in follower.traces["fifo"].error
    assert "FIFO" in follower.placeholders["fifo"].error
    assert sum(t.error is None for t in follower.traces.values()) == 1


HOSTILE_LINES = st.one_of(
    st.binary(max_size=40).filter(lambda b: b"\n" not in b),
    st.sampled_from([b"\xff\xfe not utf-8", b"[1, 2]", b"null", b'{"trace": 5}', b'{"trace": "T", "nodes": "no"}', b'{"trace": "T", "set": {"timing": "x"}}', b'{"trace": "T", "links": {"9": []}}', b'{"trace": "other", "open": {}}', b"{" * 3000 + b"}" * 3000]),
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(HOSTILE_LINES, max_size=6), cut=st.integers(0, 2), headless=st.booleans())
def test_hostile_files_are_one_row_each_never_a_traceback(tmp_path_factory, lines, cut, headless):
    out = tmp_path_factory.mktemp("hostile")
    orchestrator = Orchestrator(FileMonitor(out, "orchestrator"))
    rollout, _ = streamed(orchestrator)
    live = traces_dir(out) / "live"
    good = live / f"{rollout.trace.id}.jsonl"
    good_lines = [line for line in good.read_bytes().split(b"\n") if line]
    body = b"\n".join(good_lines[cut and 1 if headless else 0 : cut + 1] + [line.replace(b"T", rollout.trace.id.encode()) for line in lines])
    (live / "T.jsonl").write_bytes(body + b"\n")
    (live / "U.jsonl").write_bytes(body)
    follower = LiveFollower(live, live / "pending")
    follower.poll()
    assert follower.traces[rollout.trace.id].error is None and follower.traces[rollout.trace.id].lines == len(good_lines)
    for name in ("T", "U"):
        trace = follower.traces[name]
        assert trace.error is None or isinstance(trace.error, str) and trace.error
        _ = trace.stage


def test_an_enormous_line_is_refused_without_reading_it_all(run, monkeypatch):
    orchestrator, live, follower = run
    monkeypatch.setattr("tracewatch.core.recordings.prime_rl.live.MAX_LINE", 1 << 16)
    rollout, deltas = streamed(orchestrator)
    path = live / f"{rollout.trace.id}.jsonl"
    with open(path, "ab") as file:
        file.write(b'{"trace": "' + b"x" * (1 << 18))
    follower.poll()  # the whole lines before it
    follower.poll()
    assert "longer than" in follower.traces[rollout.trace.id].error
    assert follower.traces[rollout.trace.id].lines == len(deltas)


def test_a_poll_s_byte_budget_leaves_the_rest_for_the_next(run):
    orchestrator, live, follower = run
    rollouts = [orchestrator.dispatch("train", 1, "gsm8k", task) for task in range(6)]
    for rollout in rollouts:
        orchestrator.turn(rollout)
    orchestrator.flush()
    changes = follower.poll(max_bytes=1)
    assert changes.more and sum(t.lines > 0 for t in follower.traces.values()) == 1, "one file a poll at this budget"
    while changes.more:
        later = follower.poll(max_bytes=1)
        changes.merge(later)
    assert {t.trace_id for t in changes.changed} == {r.trace.id for r in rollouts}
    assert all(t.lines == 2 and t.error is None for t in follower.traces.values())
