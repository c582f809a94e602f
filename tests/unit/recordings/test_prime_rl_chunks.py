"""One record read at its (chunk, offset): from the plain chunk, from the sealed one
(seekable zstd, across frames), while it is being sealed, after its plain file is
gone, after a relaunch started a new chunk; and a row that points nowhere, a chunk that
vanished or is corrupt, or a link planted as a chunk: a reason, never a traceback."""

from __future__ import annotations

import os
import threading

import orjson
import pytest

from tests.support.prime_rl_monitor import ChunkedStream, seal
from tracewatch.core.recordings.prime_rl.chunks import RecordUnreadable, chunk_numbers, read_record


def records(count, size=300):
    return [{"id": f"{n:032x}", "pad": "x" * (size + n % 7)} for n in range(count)]


@pytest.fixture
def stream(tmp_path):
    directory = tmp_path / "stream"
    writer = ChunkedStream(directory, max_bytes=2000, compress=True, frame_bytes=512)
    placed = [(record, *writer.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))) for record in records(20)]
    writer.flush()
    return directory, writer, placed


def test_every_record_reads_at_its_address_plain_sealed_and_across_frames(stream):
    directory, writer, placed = stream
    for sealing in writer.sealing:
        sealing.join()
    numbers = chunk_numbers(directory)
    assert any(numbers.values()) and not all(numbers.values()), "sealed chunks and the live plain one"
    for record, chunk, offset in placed:
        assert read_record(directory, chunk, offset) == record
    writer.close()
    assert all(chunk_numbers(directory).values())
    for record, chunk, offset in placed:
        assert read_record(directory, chunk, offset) == record


def test_a_relaunch_appends_to_a_plain_last_chunk_and_starts_a_new_one_after_a_sealed_one(stream):
    directory, writer, placed = stream
    writer.flush()
    for sealing in writer.sealing:  # the first process's seals are done before it exits
        sealing.join()
    writer.file.close()  # ... and it ends without finalizing: its last chunk stays plain
    again = ChunkedStream(directory, max_bytes=2000, compress=True, frame_bytes=512)
    assert again.number == placed[-1][1]
    record = {"id": "after the relaunch"}
    chunk, offset = again.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
    again.close()
    third = ChunkedStream(directory, max_bytes=2000, compress=True, frame_bytes=512)
    later = {"id": "after the second"}
    new_chunk, new_offset = third.append(orjson.dumps(later, option=orjson.OPT_APPEND_NEWLINE))
    third.close()
    assert new_chunk == chunk + 1 and new_offset == 0
    assert read_record(directory, chunk, offset) == record and read_record(directory, new_chunk, 0) == later


def test_a_chunk_sealed_while_read_and_its_plain_file_removed_still_reads(tmp_path):
    directory = tmp_path / "stream"
    directory.mkdir()
    lines = [orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE) for record in records(400)]
    (directory / "00000.jsonl").write_bytes(b"".join(lines))
    offsets = [sum(map(len, lines[:n])) for n in range(len(lines))]
    sealer = threading.Thread(target=seal, args=(directory / "00000.jsonl", 4096))
    sealer.start()
    for n in range(0, 400, 3):
        assert read_record(directory, 0, offsets[n])["id"] == f"{n:032x}"
    sealer.join()
    assert not (directory / "00000.jsonl").exists()
    assert read_record(directory, 0, offsets[-1])["id"] == f"{399:032x}"


def test_a_partial_seal_is_never_opened(tmp_path):
    directory = tmp_path / "stream"
    directory.mkdir()
    (directory / "00003.jsonl.zst.tmp").write_bytes(b"half a seal")
    assert chunk_numbers(directory) == {}
    with pytest.raises(RecordUnreadable, match="chunk 3 .* is gone"):
        read_record(directory, 3, 0)


@pytest.mark.parametrize(
    "chunk, offset, said",
    [(7, 0, "is gone"), (0, 10**9, "past the end"), (0, 5, "not a record"), (-1, 0, "negative"), (1, 10**9, "past the end")],
)
def test_a_row_pointing_nowhere_gets_a_reason(stream, chunk, offset, said):
    directory, writer, _ = stream
    writer.close()
    with pytest.raises(RecordUnreadable, match=said):
        read_record(directory, chunk, offset)


def test_a_corrupt_sealed_chunk_and_a_planted_link_get_a_reason(tmp_path):
    directory = tmp_path / "stream"
    directory.mkdir()
    (directory / "00000.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd garbage")
    with pytest.raises(RecordUnreadable, match="seekable zstd"):
        read_record(directory, 0, 0)
    secret = tmp_path / "secret"
    secret.write_bytes(b'{"id": "secret"}\n')
    os.symlink(secret, directory / "00001.jsonl")
    with pytest.raises(RecordUnreadable, match="symbolic link"):
        read_record(directory, 1, 0)
    os.mkfifo(directory / "00002.jsonl")
    with pytest.raises(RecordUnreadable, match="FIFO"):
        read_record(directory, 2, 0)


def test_a_sealed_chunk_is_many_frames_with_a_seek_table(tmp_path):
    """What lets a read decompress one frame, not the chunk: prime-rl's seal cuts frames
    of `max_frame_content_size` and ends with the seek table (its footer: the frame
    count, a descriptor byte, the magic number)."""
    directory = tmp_path / "stream"
    directory.mkdir()
    lines = [orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE) for record in records(3000)]
    (directory / "00000.jsonl").write_bytes(b"".join(lines))
    seal(directory / "00000.jsonl", 8192)
    footer = (directory / "00000.jsonl.zst").read_bytes()[-9:]
    assert footer[-4:] == bytes.fromhex("b1ea928f") and int.from_bytes(footer[:4], "little") == -(-len(b"".join(lines)) // 8192)
    last = sum(map(len, lines[:-1]))
    assert read_record(directory, 0, last)["id"] == f"{2999:032x}"
