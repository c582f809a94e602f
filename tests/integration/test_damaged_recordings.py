"""Damaged recordings: a record that cannot be read, or reads as something the app
never writes, is skipped and counted, and the rest replays; no byte flipped anywhere
in a recording makes `replay`, `open` or `export` raise. Driven through the command
itself (`tracewatch.cli.main`, headless), on a recording of a real session."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.scripted_server import ScriptedServer, endings, good_run, header, replay, run_live
from tracewatch.cli import main
from tracewatch.core.recordings.file_format import RecordingError
from tracewatch.core.recordings.index import RecordingIndex
from tracewatch.core.recordings.reader import Scan, read_header, read_recording


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> tuple[Path, dict]:
    """A session of five rollouts (four done, one failed on a bad delta), recorded."""
    tmp_path = tmp_path_factory.mktemp("recorded")
    scripts = {f"t{i}": good_run(turns=i + 1) for i in range(4)}
    scripts["bad"] = [("delta", {"trace": "t", "open": header("t")}), ("delta", {"trace": "t", "calls": [5]})]

    async def run() -> dict:
        async with ScriptedServer(scripts) as server:
            engine, _, _ = await run_live(tmp_path, server, list(scripts))
        return endings(engine.store)

    return tmp_path / "live.twrec", asyncio.run(run())


def offsets_of(path: Path, kind: str, rollout: str) -> list[int]:
    """Where each record of that kind and rollout starts."""
    start = read_header(path).start
    return [offset for offset, _, r in Scan(path, start, msgpack.Unpacker.unpack) if r["k"] == kind and r["id"] == rollout]


def test_an_unreadable_record_is_skipped_and_the_rest_replays(recording, tmp_path, capfd):
    path, live = recording
    data = bytearray(path.read_bytes())
    second_delta = offsets_of(path, "delta", "remote/0")[1]
    data[second_delta] = 0xC1  # never valid msgpack
    damaged = tmp_path / "damaged.twrec"
    damaged.write_bytes(bytes(data))
    assert main(["replay", str(damaged), "--headless", "--speed", "0"]) == 1
    out = capfd.readouterr().out
    assert f"note: {damaged}: 1 damaged record(s) skipped, the first at byte {second_delta}" in out
    replayed = asyncio.run(replay(damaged))
    assert {key: ending for key, ending in endings(replayed.store).items() if key != "remote/0"} == {
        key: ending for key, ending in live.items() if key != "remote/0"
    }


def test_a_record_of_the_wrong_shape_is_skipped_and_counted(recording, tmp_path, capfd):
    path, live = recording
    records = list(read_recording(path))
    request = next(i for i, r in enumerate(records) if r["k"] == "request")
    records[request] = {**records[request], "request_id": 7}  # a flipped type byte
    records.insert(request, {"k": "delta", "t": 1.0, "id": "nobody/0", "d": {}})
    damaged = tmp_path / "damaged.twrec"
    damaged.write_bytes(b"".join(msgpack.packb(r) for r in [read_recording(path).header, *records]))
    for command in (["replay", str(damaged), "--speed", "0"], ["open", str(damaged)]):
        assert main([*command, "--headless"]) == 1
        out = capfd.readouterr().out
        assert "2 damaged record(s) skipped, the first: rollout 'nobody/0' was never announced" in out, command


def test_a_cut_recording_says_where_in_a_headless_replay(recording, tmp_path, capfd):
    path, _ = recording
    data = path.read_bytes()
    cut = tmp_path / "cut.twrec"
    cut.write_bytes(data[: len(data) - 5])
    main(["replay", str(cut), "--headless", "--speed", "0"])
    assert f"note: {cut}: cut at byte" in capfd.readouterr().out


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.floats(0, 1, exclude_max=True), flip=st.integers(1, 255))
def test_no_flipped_byte_makes_replay_open_or_export_raise(recording, tmp_path, capfd, where, flip):
    path, _ = recording
    data = bytearray(path.read_bytes())
    data[int(where * len(data))] ^= flip
    damaged = tmp_path / "flipped.twrec"
    damaged.write_bytes(bytes(data))
    for command in (
        ["replay", str(damaged), "--headless", "--speed", "0"],
        ["open", str(damaged), "--headless"],
        ["export", str(damaged), str(tmp_path / "out.jsonl")],
        ["export", str(damaged), str(tmp_path / "out.jsonl"), "--episodes"],
    ):
        assert main(command) in (0, 1, 2), command  # 2: a header no longer ours, said so
    assert "Traceback" not in capfd.readouterr().err


def test_a_flipped_byte_in_the_header_is_reported_and_every_record_still_reads(recording, tmp_path, capfd):
    """Every byte of the header, each flipped three ways: the records after it all
    read, through the command and the index alike; only a version number raised past
    this reader's is refused (a newer file), as before."""
    path, _ = recording
    original = list(read_recording(path))
    start = read_header(path).start
    data = path.read_bytes()
    damaged = tmp_path / "header.twrec"
    refused = reported = 0
    for where in range(start):
        for flip in (0x01, 0x20, 0xFF):
            flipped = bytearray(data)
            flipped[where] ^= flip
            damaged.write_bytes(bytes(flipped))
            try:
                recording_read = read_recording(damaged)
            except RecordingError as error:
                assert "format version" in str(error), (where, flip, str(error))
                refused += 1
                continue
            assert list(recording_read) == original, (where, flip)
            index = RecordingIndex.build(damaged)
            assert index.records == len(original) and index.truncated == recording_read.truncated, (where, flip)
            if recording_read.truncated:
                assert "the header is damaged" in recording_read.truncated and "damaged record" not in recording_read.truncated
                reported += 1
    assert reported > start  # most flips break the header; the rest land in values nobody checks (the start time)
    assert refused <= 3

    flipped = bytearray(data)
    flipped[3] ^= 0x20  # inside "format": the file no longer says it is a recording
    damaged.write_bytes(bytes(flipped))
    assert main(["export", str(damaged), str(tmp_path / "out.jsonl")]) == 0
    assert f"{damaged}: the header is damaged (it starts with dict" in capfd.readouterr().err
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == len(original) + 1


def test_a_file_that_only_looks_like_a_recording_after_a_few_bytes_is_not_one(tmp_path):
    stranger = tmp_path / "stranger.twrec"
    stranger.write_bytes(msgpack.packb({"fmt": "something else", "v": 1}) + msgpack.packb({"k": "delta", "id": "x"}))
    with pytest.raises(RecordingError, match="is not a tracewatch recording"):
        read_recording(stranger)
