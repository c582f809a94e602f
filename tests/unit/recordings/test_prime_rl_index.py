"""The episode index read as it grows, into columns: rows as prime-rl writes them land
in the right columns; a torn tail waits; a garbage line (or a row torn by a crash and
glued to the next) is skipped and counted, never a stop; wrong types read as absent."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.prime_rl_monitor import FileMonitor, traces_dir
from tests.support.prime_rl_orchestrator import Orchestrator
from tracewatch.core.recordings.prime_rl.columns import MISSING
from tracewatch.core.recordings.prime_rl.episodes import EpisodeIndex


def landed(out, count=5):
    orchestrator = Orchestrator(FileMonitor(out, "orchestrator", chunk_bytes=2048))
    rows = []
    for number in range(count):
        rollout = orchestrator.dispatch("eval" if number % 2 else "train", number, "gsm8k", number, fork=number == 3)
        for _ in range(2):
            orchestrator.turn(rollout)
        orchestrator.finish(rollout, reward=number / 4)
        rows.append(rollout.index_row)
    return rows


def read_all(index: EpisodeIndex, piece: int = 1 << 20) -> None:
    while True:
        index.read_on(piece)
        if index.caught_up:
            return


def test_rows_as_prime_rl_writes_them_land_in_their_columns(tmp_path):
    rows = landed(tmp_path)
    index = EpisodeIndex(traces_dir(tmp_path) / "stream.index.jsonl")
    read_all(index, piece=300)
    table = index.table
    assert len(table) == len(rows) and not index.skipped
    for row, written in enumerate(rows):
        got = table.row(row)
        for key, value in written.items():
            assert got[key] == value, (row, key)
    assert table.column("chunk").max() > 0, "small chunks rolled"
    assert (table.column("kind") == table.code("kind", "eval")).sum() == 2
    assert table.find_traces([rows[3]["trace_ids"][0], "nope"]) == [3, MISSING]


def test_a_torn_tail_waits_and_a_garbage_line_is_skipped_not_a_stop(tmp_path):
    path = tmp_path / "stream.index.jsonl"
    good = [orjson.dumps({"line": n, "reward": n / 2, "id": f"{n:032x}", "trace_ids": [f"{n + 100:032x}"], "chunk": 0, "offset": n}) for n in range(1, 5)]
    torn = good[1][:17]
    path.write_bytes(good[0] + b"\n" + torn + good[2] + b"\n\n" + b"\xff garbage\n" + good[3][:10])
    index = EpisodeIndex(path)
    read_all(index)
    assert index.table.column("line").tolist() == [1]
    assert index.skipped.count == 2, "the torn-and-glued row and the garbage"
    with open(path, "ab") as file:
        file.write(good[3][10:] + b"\n")
    read_all(index)
    assert index.table.column("line").tolist() == [1, 4]
    assert index.table.traces_of(1) == [f"{104:032x}"]


def test_wrong_types_read_as_absent(tmp_path):
    path = tmp_path / "stream.index.jsonl"
    row = {"line": "1", "reward": "0.5", "turns": 2.0, "ok": 1, "env": 7, "trace_ids": "abc", "id": ["x"], "offset": 2**64 - 1, "advantage": True, "cost": 1e300}
    path.write_bytes(orjson.dumps(row) + b"\n" + b'{"reward": 1e400}\n' + b"[1,2]\n")
    index = EpisodeIndex(path)
    read_all(index)
    got = index.table.row(0)
    assert got["line"] is None and got["reward"] is None and got["turns"] is None and got["ok"] is None
    assert got["env"] is None and got["trace_ids"] == [] and got["id"] is None and got["offset"] is None
    assert got["advantage"] is None and got["cost"] == 1e300 and got["chunk"] == 0
    assert index.skipped.count == 2 and len(index.table) == 1


def test_a_replaced_index_is_read_again_from_its_start(tmp_path):
    path = tmp_path / "stream.index.jsonl"
    path.write_bytes(b'{"line": 1}\n{"line": 2}\n')
    index = EpisodeIndex(path)
    read_all(index)
    path.write_bytes(b'{"line": 9}\n')
    read_all(index)
    assert index.generation == 1 and index.table.column("line").tolist() == [9]


ROW = st.fixed_dictionaries(
    {},
    optional={
        "line": st.one_of(st.integers(-5, 10**20), st.integers(2**31 - 2, 2**31 + 1), st.text(max_size=3), st.none()),
        "reward": st.one_of(st.floats(allow_nan=False), st.integers(), st.booleans(), st.none(), st.text(max_size=3)),
        "id": st.one_of(st.text(max_size=40), st.from_regex(r"[0-9a-f]{32}", fullmatch=True), st.none(), st.integers()),
        "trace_ids": st.one_of(st.lists(st.one_of(st.from_regex(r"[0-9a-f]{32}", fullmatch=True), st.text(max_size=8), st.integers()), max_size=3), st.text(max_size=3)),
        "env": st.one_of(st.sampled_from(["gsm8k", "math"]), st.integers(), st.none()),
        "turns": st.one_of(st.integers(-(2**40), 2**40), st.floats(allow_nan=False)),
        "ok": st.one_of(st.booleans(), st.none(), st.integers(0, 1)),
    },
)
PIECE = st.one_of(ROW.map(lambda row: json.dumps(row).encode() + b"\n"), st.binary(max_size=30), st.just(b"\n"), st.just(b"[]\n"))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(PIECE, max_size=25), budget=st.integers(1, 400))
def test_hostile_bytes_read_in_any_pieces_give_the_rows_a_line_by_line_reader_gives(tmp_path_factory, pieces, budget):
    path = tmp_path_factory.mktemp("index") / "stream.index.jsonl"
    data = b"".join(pieces)
    index = EpisodeIndex(path)
    for cut in sorted({0, len(data) // 3, len(data)}):  # written in three appends, read between
        with open(path, "ab") as file:
            file.write(data[len(path.read_bytes()) if path.exists() else 0 : cut])
        read_all(index, budget)
    expected = []
    for line in data[: data.rfind(b"\n") + 1].split(b"\n"):
        try:
            value = orjson.loads(line) if line.strip() else None
        except orjson.JSONDecodeError:
            continue
        if type(value) is dict:
            expected.append(value)
    table = index.table
    assert len(table) == len(expected)
    for row, value in enumerate(expected):
        ids = value.get("trace_ids")
        assert table.traces_of(row) == ([i for i in ids if type(i) is str] if type(ids) is list else [])
        assert table.episode_id(row) == (value["id"] if type(value.get("id")) is str else None)
        reward = value.get("reward")
        want = float(reward) if type(reward) in (int, float) else math.nan
        assert np.isnan(table.column("reward")[row]) if math.isnan(want) else table.column("reward")[row] == want
        line = value.get("line")
        assert table.column("line")[row] == (line if type(line) is int and -(2**31) <= line < 2**31 else MISSING)
