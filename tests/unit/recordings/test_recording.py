"""Recordings written by `Recorder` and read back from real files: whole, cut, foreign,
while still being written, and through the index."""

from __future__ import annotations

import errno
import functools
import math
import os
import stat
import tempfile
import threading
import time
from pathlib import Path

import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.polling import wait_until
from tracewatch.core.paths import default_recording_path
from tracewatch.core.recordings import recorder as recording
from tracewatch.core.recordings.file_format import RecordingError
from tracewatch.core.recordings.index import RecordingIndex
from tracewatch.core.recordings.reader import read_recording
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.trace_state import ERROR_WORDS_LIMIT

ND = {"__nd__": True, "dtype": "uint8", "shape": [2, 2], "data": bytes([0, 1, 255, 7])}


def write_sample(path: Path) -> None:
    """Two interleaved rollouts, one of each outcome the index summarises, and every
    record kind, with the awkward values the wire carries (bytes, int map keys)."""
    with Recorder(path, meta={"variants": ["baseline", "candidate"]}) as rec:
        rec.event("baseline", "started", t=1.0, pid=4242)
        rec.rollout("baseline/0", "baseline", 0, {"prompt": "2+2"}, 0, t=2.0)
        rec.rollout("candidate/0", "candidate", 0, {"prompt": "2+2"}, 0, t=2.5)
        rec.request("baseline/0", "req-a", t=3.0)
        rec.request("candidate/0", "req-b", t=3.1)
        rec.delta("baseline/0", {"trace": "ta", "open": {"id": "ta"}, "set": {"rewards": {}}}, t=4.0)
        rec.delta("candidate/0", {"trace": "tb", "open": {"id": "tb"}}, t=4.1)
        rec.delta(
            "baseline/0",
            {"trace": "ta", "nodes": [{"parent": None, "routed_experts": ND}], "links": {0: [{"type": "x"}]}},
            t=5.0,
        )
        rec.delta("baseline/0", {"trace": "ta", "set": {"rewards": {"correct": None}}}, t=6.0)
        rec.delta(
            "baseline/0",
            {"trace": "ta", "set": {"rewards": {"correct": {"score": 0.5, "weight": 2.0}}}},
            t=6.5,
        )
        rec.reply(
            "baseline/0",
            {"success": True, "error": None, "head": {"ok": True}, "traces": [{"id": "ta", "nodes": 1, "calls": 0}]},
            t=7.0,
        )
        rec.reply("candidate/0", {"success": False, "error": "Cancelled: rollout aborted"}, t=7.5)
        rec.event("baseline", "exited", t=8.0, code=0, reason="done")


def boundaries(path: Path) -> tuple[int, list[int], list[dict]]:
    """Header end, each record's end offset, and the records: packing is
    deterministic, so re-packing what was read gives each record's size."""
    data = path.read_bytes()
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    unpacker.unpack()
    header_end = unpacker.tell()
    records, ends = [], []
    for record in unpacker:
        records.append(record)
        ends.append(unpacker.tell())
    return header_end, ends, records


def test_every_record_kind_round_trips(tmp_path):
    path = tmp_path / "deep" / "er" / "run.twrec"
    write_sample(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    rec = read_recording(path)
    assert rec.header["format"] == "tracewatch-recording"
    assert rec.header["version"] == 1
    assert rec.header["meta"] == {"variants": ["baseline", "candidate"]}
    assert isinstance(rec.header["created"], float)
    records = list(rec)
    assert rec.truncated is None
    assert rec.records_read == len(records) == 13
    assert [r["k"] for r in records] == [
        "event", "rollout", "rollout", "request", "request",
        "delta", "delta", "delta", "delta", "delta", "reply", "reply", "event",
    ]  # fmt: skip
    assert records[0] == {"k": "event", "t": 1.0, "variant": "baseline", "kind": "started", "pid": 4242}
    assert records[1] == {
        "k": "rollout", "t": 2.0, "id": "baseline/0", "variant": "baseline",
        "task_index": 0, "task_data": {"prompt": "2+2"}, "rollout_index": 0, "run": 1,
    }  # fmt: skip
    assert records[3] == {"k": "request", "t": 3.0, "id": "baseline/0", "request_id": "req-a"}
    node_delta = records[7]["d"]
    assert node_delta["nodes"][0]["routed_experts"] == ND  # bytes stay bytes
    assert node_delta["links"] == {0: [{"type": "x"}]}  # int keys stay ints
    assert records[11]["r"] == {"success": False, "error": "Cancelled: rollout aborted"}
    assert records[12]["reason"] == "done"
    assert list(rec) == records  # each pass reads afresh


WIRE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text() | st.integers(-(2**31), 2**31), inner, max_size=4),
    max_leaves=20,
)
DELTAS = st.dictionaries(st.text(max_size=8), WIRE_VALUES, max_size=5).map(lambda d: {"trace": "t", **d})


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(deltas=st.lists(DELTAS, min_size=1, max_size=6))
def test_a_frame_is_recorded_as_it_came_and_reads_as_a_delta(deltas):
    """The live path records each delta's frame bytes without packing it again; a
    reader sees the same records `delta` writes from the decoded map."""
    frames = [msgpack.packb(delta, use_bin_type=True) for delta in deltas]
    with tempfile.TemporaryDirectory() as directory:
        check_frames_recorded(Path(directory), frames)


def check_frames_recorded(tmp_path: Path, frames: list[bytes]) -> None:
    as_frames, as_maps = tmp_path / "frames.twrec", tmp_path / "maps.twrec"
    with Recorder(as_frames) as rec:
        for n, frame in enumerate(frames):
            rec.delta_frame("v/0", frame, t=float(n))
    with Recorder(as_maps) as rec:
        for n, frame in enumerate(frames):
            rec.delta("v/0", msgpack.unpackb(frame, raw=False, strict_map_key=False), t=float(n))
    written = as_frames.read_bytes()
    position = 0
    for frame in frames:  # verbatim, in order
        position = written.index(frame, position) + len(frame)
    read = list(read_recording(as_frames))
    assert read == list(read_recording(as_maps))
    assert [record["d"] for record in read] == [msgpack.unpackb(f, raw=False, strict_map_key=False) for f in frames]


@pytest.mark.slow
def test_a_cut_file_reads_up_to_its_cut_with_a_note(tmp_path):
    full = tmp_path / "full.twrec"
    write_sample(full)
    data = full.read_bytes()
    header_end, ends, records = boundaries(full)
    cut_path = tmp_path / "cut.twrec"
    for cut in range(len(data) + 1):  # every byte position, the header's included
        cut_path.write_bytes(data[:cut])
        rec = read_recording(cut_path)
        got = list(rec)
        if cut < header_end:
            assert rec.header == {} and got == [], cut
            assert "empty" in rec.truncated if cut == 0 else f"inside its header at byte {cut}" in rec.truncated
            continue
        whole = sum(end <= cut for end in ends)
        assert got == records[:whole], cut
        start = ends[whole - 1] if whole else header_end
        if cut == start:
            assert rec.truncated is None, cut
        else:
            assert f"cut at byte {start} of {cut}" in rec.truncated, cut
            assert f"{whole} records read" in rec.truncated
            assert str(cut_path) in rec.truncated


def test_damaged_data_is_skipped_and_counted_and_the_rest_reads(tmp_path):
    path = tmp_path / "damaged.twrec"
    write_sample(path)
    header_end, ends, records = boundaries(path)
    data = path.read_bytes()
    # 0xc1 is the one byte msgpack never uses
    path.write_bytes(data[: ends[2]] + b"\xc1" + data[ends[2] :])
    rec = read_recording(path)
    assert list(rec) == records
    assert f"1 damaged record(s) skipped, the first at byte {ends[2]}" in rec.truncated


@pytest.mark.parametrize(
    ("content", "found"),
    [
        (b'{"format": "tracewatch-recording"}\n', "int 123"),  # JSON: '{' is a msgpack int
        (b"\x89PNG\r\n\x1a\n" + bytes(64), "starts with dict"),  # 0x89 is a msgpack map
        (msgpack.packb([1, 2, 3]), "list [1, 2, 3]"),
        (msgpack.packb({"format": "something-else", "version": 1}), "format 'tracewatch-recording'"),
        (msgpack.packb({"format": "tracewatch-recording", "version": 2}), "version 2"),
        (msgpack.packb({"format": "tracewatch-recording", "version": "1"}), "version '1'"),
        (msgpack.packb({"format": "tracewatch-recording"}), "version None"),
        (b"\xdb\xff\xff\xff\xffhello", "not msgpack"),  # a str claiming 4 GB
        (b"\xc1", "not a tracewatch recording"),
    ],
)
def test_another_format_or_version_is_refused(tmp_path, content, found):
    path = tmp_path / "other.bin"
    path.write_bytes(content)
    with pytest.raises(RecordingError) as raised:
        read_recording(path)
    assert str(path) in str(raised.value)
    assert found in str(raised.value)
    with pytest.raises(RecordingError):
        RecordingIndex.build(path)


def test_a_missing_file_is_a_recording_error(tmp_path):
    with pytest.raises(RecordingError, match="cannot open recording"):
        read_recording(tmp_path / "nope.twrec")


def test_the_file_is_readable_while_still_being_written(tmp_path):
    path = tmp_path / "live.twrec"
    rec = Recorder(path, flush_interval=0.05)

    def on_disk(count: int) -> list[dict] | None:
        records = list(read_recording(path))
        return records if len(records) == count else None

    try:
        assert read_recording(path).header["format"] == "tracewatch-recording"  # header at once
        for n in range(3):
            rec.delta("v/0", {"trace": "t", "set": {"n": n}})
            # the writer thread lands the batch with no further append or close
            got = wait_until(functools.partial(on_disk, n + 1), what=f"batch {n} to reach the file")
            assert got[-1]["d"]["set"] == {"n": n}
    finally:
        rec.close()
    rec.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        rec.delta("v/0", {"trace": "t"})


def test_flush_waits_for_the_disk(tmp_path):
    path = tmp_path / "flush.twrec"
    with Recorder(path, flush_interval=3600) as rec:
        rec.event("v", "started")
        assert rec.flush(timeout=10)
        assert [r["kind"] for r in read_recording(path)] == ["started"]


def test_appends_from_many_threads_all_land_in_order(tmp_path):
    path = tmp_path / "threads.twrec"
    with Recorder(path, flush_interval=0.01, max_batch=4096) as rec:

        def append(variant: str) -> None:
            for n in range(500):
                rec.delta(f"{variant}/0", {"trace": variant, "set": {"n": n}, "pad": "x" * (n % 50)})

        threads = [threading.Thread(target=append, args=(f"v{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    by_id: dict[str, list[int]] = {}
    rec_in = read_recording(path)
    for record in rec_in:
        by_id.setdefault(record["id"], []).append(record["d"]["set"]["n"])
    assert rec_in.truncated is None
    assert by_id == {f"v{i}/0": list(range(500)) for i in range(4)}


def test_a_failed_write_stops_recording_without_breaking_appends(tmp_path, monkeypatch):
    path = tmp_path / "full-disk.twrec"
    rec = Recorder(path, flush_interval=0.01)
    rec.event("v", "started")
    assert rec.flush(timeout=10)

    def disk_full(fd, data):
        return 0, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(recording, "_write_some", disk_full)
    rec.delta("v/0", {"trace": "t"})
    assert rec.flush(timeout=10)
    assert rec.error is not None
    assert str(path) in rec.error and "No space left" in rec.error
    rec.delta("v/0", {"trace": "t"})  # dropped, not raised: the runs go on
    rec.close()
    assert [r["kind"] for r in read_recording(path)] == ["started"]


def test_recorder_never_overwrites_and_rejects_a_field_named_k(tmp_path):
    path = tmp_path / "once.twrec"
    with Recorder(path) as rec:
        with pytest.raises(ValueError, match="'k'"):
            rec.event("v", "x", k="oops")
    with pytest.raises(FileExistsError):
        Recorder(path)


def test_default_path_follows_tracewatch_home_then_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEWATCH_HOME", str(tmp_path / "tw"))
    path = default_recording_path()
    assert path.parent == tmp_path / "tw" / "recordings"
    assert path.suffix == ".twrec"
    stamp, pid = path.stem.rsplit("-", 1)
    assert pid == str(os.getpid())
    time.strptime(stamp, "%Y%m%d-%H%M%S")
    monkeypatch.delenv("TRACEWATCH_HOME")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_recording_path().parent == tmp_path / "state" / "tracewatch" / "recordings"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_recording_path().parent == tmp_path / "home" / ".local" / "state" / "tracewatch" / "recordings"


def test_index_loads_exactly_each_rollouts_records(tmp_path):
    path = tmp_path / "indexed.twrec"
    write_sample(path)
    records = list(read_recording(path))
    index = RecordingIndex.build(path)
    assert index.truncated is None
    assert index.records == len(records)
    assert index.header == read_recording(path).header
    assert list(index.rollouts) == ["baseline/0", "candidate/0"]
    for rollout_id in index.rollouts:
        assert index.load(rollout_id) == [r for r in records if r.get("id") == rollout_id]
    assert index.events == [r for r in records if r["k"] == "event"]

    baseline, candidate = index.rollouts["baseline/0"], index.rollouts["candidate/0"]
    assert baseline.announce == records[1]
    assert baseline.request_ids == ["req-a"]
    assert (baseline.deltas, baseline.records) == (4, 7)
    assert (baseline.first_t, baseline.last_t) == (2.0, 7.0)
    assert baseline.status is Status.DONE
    assert math.isclose(baseline.facts.reward, 1.0)  # 0.5 x weight 2
    assert candidate.status is Status.CANCELLED
    assert candidate.facts.reward is None
    assert (candidate.deltas, candidate.records) == (1, 4)


def test_index_of_a_cut_recording_keeps_what_landed(tmp_path):
    path = tmp_path / "cut.twrec"
    write_sample(path)
    header_end, ends, records = boundaries(path)
    data = path.read_bytes()
    path.write_bytes(data[: ends[9] + 3])  # inside the first reply
    index = RecordingIndex.build(path)
    assert f"cut at byte {ends[9]}" in index.truncated
    assert index.records == 10
    baseline = index.rollouts["baseline/0"]
    assert baseline.status is Status.RUNNING
    assert index.load("baseline/0") == [r for r in records[:10] if r.get("id") == "baseline/0"]

    path.write_bytes(data[: header_end - 1])
    index = RecordingIndex.build(path)
    assert "inside its header" in index.truncated and index.rollouts == {}


ERRORS = st.lists(
    st.one_of(
        st.fixed_dictionaries({"type": st.text(max_size=20), "message": st.text(max_size=3000)}),
        st.sampled_from([{"type": "ProviderError", "message": "400 context too long"}, {"type": "SandboxError", "message": "died"}]),
    ),
    max_size=3,
)
PROVIDER_400 = {"type": "ProviderError", "message": "400 context too long"}


def distinct_errors(landed: list[tuple[list[dict], list[dict]]]) -> int:
    """The reference count: every error of the trace, and every failed call but one
    per trace error that is the same error (type and message)."""
    unmatched = [e for errors, _ in landed for e in errors]
    count = len(unmatched)
    for call_error in (e for _, failed in landed for e in failed):
        if call_error in unmatched:
            unmatched.remove(call_error)
        else:
            count += 1
    return count


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(landed=st.lists(st.tuples(ERRORS, ERRORS), min_size=1, max_size=4))
@example(landed=[([], [{"type": "ProviderError", "message": "retried"}])])
@example(landed=[([], [PROVIDER_400]), ([PROVIDER_400], [])])
@example(landed=[([{"type": "A", "message": "x" * 3000}], [{"type": "B", "message": "y" * 3000}]), ([{"type": "C", "message": "z"}], [])])
def test_an_opened_rollout_keeps_its_errors_as_the_live_store_does(landed):
    """`error:TEXT` finds the same rollouts in a recording opened later as it did live:
    the index keeps the words of every error and failed call the store kept, in the
    order they landed and cut at the same length; a failed call that was retried
    puts a trace in error in neither; and both count an error that is the trace's and
    its failed call's once."""
    deltas = [{"trace": "ta", "open": {"id": "ta"}}]
    deltas += [
        {"trace": "ta", "errors": errors, "calls": [{"node": None, "error": error} for error in failed]} for errors, failed in landed
    ]
    store = RolloutStore()
    store.add_rollout("v", 0, {"prompt": "p"}, 0, key="v/0", t=1.0)
    store.started("v/0", "req", 1.0)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "errors.twrec"
        with Recorder(path) as rec:
            rec.rollout("v/0", "v", 0, {"prompt": "p"}, 0, t=1.0)
            rec.request("v/0", "req", t=1.0)
            for t, delta in enumerate(deltas, 2):
                rec.delta("v/0", delta, t=float(t))
                store.apply_delta("v/0", delta, float(t))
        opened = RecordingIndex.build(path).rollouts["v/0"].facts
    live = store.rollouts["v/0"].summary()
    assert store.rollouts["v/0"].status is Status.RUNNING, store.rollouts["v/0"].reason
    assert (opened.errors, opened.error_text, opened.phase) == (live.errors, live.error_text, live.phase)
    assert live.errors == distinct_errors(landed)
    words = [f"{e['type']}: {e['message']}".lower() for errors, failed in landed for e in [*errors, *failed]]
    assert live.error_text == "\n".join(words)[:ERROR_WORDS_LIMIT]
