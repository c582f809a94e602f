"""A recording opened for the screen reads its index on after the session starts, a
slice at a time on the loop: rows join as it reads, the store says it is partial until
the end, and a rollout selected before all its records are read fills in."""

from __future__ import annotations

import asyncio
import io
import os
import signal
from pathlib import Path

import pytest
from textual.widgets import Static

from tests.support.app_screen import card_text, screen_text
from tests.support.polling import eventually, until
from tests.support.tui_standin import T0, load_fixture, write_many_runs
from tracewatch.core.engine import opened
from tracewatch.core.engine.headless import run_headless
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.app import TracewatchApp

COPIES = 60
"""4,620 records: dozens of slices of the index."""


def rows(store: RolloutStore) -> dict:
    """What each rollout's row shows."""
    return {key: (r.status, r.reason, r.phase, r.turns, r.tokens, r.reward, r.errors, r.flags) for key, r in store.rollouts.items()}


async def one_slice(_: float) -> None:
    await asyncio.sleep(0)  # the reader's task runs one slice, then hands the loop back


@pytest.fixture
def many(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The recording, read a step of records a slice: how many slices it takes is the
    file's, not the box's speed (a fast box read it in a few 20 ms slices)."""
    monkeypatch.setattr(opened, "SLICE_SECONDS", 0.0)
    path = tmp_path / "many.twrec"
    write_many_runs(path, COPIES)
    return path


async def test_rows_join_as_the_index_reads_on_and_end_as_an_index_read_at_once_shows_them(many: Path) -> None:
    whole = OpenedRecording(many)
    session = OpenedRecording(many, at_once=False)
    assert not session.store.rollouts and session.store.partial == "indexing 0%"  # the header only, before the first screen
    await session.start()
    seen: list[tuple[int, int, str | None]] = []

    def read_to_the_end() -> bool:
        seen.append((session.index.read_to, len(session.store.rollouts), session.store.partial))
        return session.index.done

    await eventually(read_to_the_end, sleep=one_slice)
    await session.wait()
    reading = [(read_to, partial) for read_to, _, partial in seen[:-1]]
    assert len(reading) >= 5, "the loop is handed back between slices"
    assert [read_to for read_to, _ in reading] == sorted({read_to for read_to, _ in reading})
    assert all(partial is not None and partial.startswith("indexing ") for _, partial in reading)
    counts = [count for _, count, _ in seen]
    assert counts == sorted(counts) and 0 < counts[1] and counts[-1] == len(whole.store.rollouts)  # rows from the first slice on
    assert session.store.partial is None
    assert list(session.store.rollouts) == list(whole.store.rollouts)
    assert rows(session.store) == rows(whole.store)
    assert session.index.records == whole.index.records and not session.loaded


async def test_a_rollout_selected_before_its_records_are_read_shows_what_is_and_fills_in(many: Path) -> None:
    whole = OpenedRecording(many)
    session = OpenedRecording(many, at_once=False)
    await session.start()
    key = next(iter(whole.store.rollouts))
    await eventually(lambda: key in session.store.rollouts and session.index.rollouts[key].deltas, sleep=one_slice)
    read_then = session.index.rollouts[key].records
    assert not session.index.done and read_then < whole.index.rollouts[key].records
    session.select(key)
    shown = session.store.rollouts[key]
    assert shown.traces and not shown.status.finished  # what is read so far
    await session.wait()
    whole.select(key)
    assert rows(session.store) == rows(whole.store)
    loaded, expected = session.store.rollouts[key], whole.store.rollouts[key]
    assert {tid: len(t.nodes) for tid, t in loaded.traces.items()} == {tid: len(t.nodes) for tid, t in expected.traces.items()}
    assert loaded.record == expected.record is not None


async def test_open_headless_stopped_while_indexing_says_its_summary_is_partial(many: Path) -> None:
    """Headless `open` stopped (SIGINT) before the index read the whole file: its
    summary's counts and mean reward are of what was read, and it says so."""
    session = OpenedRecording(many, at_once=False)
    out = io.StringIO()
    headless = asyncio.get_running_loop().create_task(run_headless(session, out))
    await eventually(lambda: session.store.rollouts, sleep=one_slice)
    os.kill(os.getpid(), signal.SIGINT)
    assert await headless == 128 + signal.SIGINT
    assert not session.index.done
    assert f"partial: {session.store.partial}" in out.getvalue(), out.getvalue()


def test_a_rollout_the_recording_left_running_is_idle_since_its_last_delta(tmp_path: Path) -> None:
    """A rollout not ended in the file (a run cut short, or one whose end the index has
    not read yet) shows its activity as the recording had it: idle since its last
    delta, not since it started. Its row's "idle" was counted from its start, longer
    than the rollout had been running."""
    deltas, tasks, replies = load_fixture()
    cut, finished = list(tasks)[:2]
    path = tmp_path / "cut.twrec"
    with Recorder(path, meta={"test": True}) as rec:
        for index, run in enumerate((cut, finished)):
            rec.rollout(f"v/{run}", "v", index, tasks[run], 0, t=T0)
            rec.request(f"v/{run}", f"req-{run}", t=T0)
        for item in deltas:
            if item["request"] in (cut, finished):
                rec.delta(f"v/{item['request']}", item["delta"], t=T0 + item["t"])
        rec.reply(f"v/{finished}", replies[finished], t=T0 + 30)
    last_delta = T0 + max(item["t"] for item in deltas if item["request"] == cut)
    session = OpenedRecording(path)
    now = session.clock.now
    assert now == T0 + 30
    rollout = session.store.rollouts[f"v/{cut}"]
    assert not rollout.status.finished
    assert rollout.activity(now) == ("idle", pytest.approx(now - last_delta))


async def test_every_count_on_screen_says_so_far_until_the_index_is_whole(many: Path) -> None:
    """The cards and Trends read as whole while the index read on, and the header said
    "4620 running" beside "read-only ... nothing is running". Held mid-index, each says
    "so far" and the header counts no running rollout; whole, none of them says it."""
    session = OpenedRecording(many, at_once=False)
    held = asyncio.Event()
    read_on = session.index.read_on

    def read_until_held(records: int | None = None) -> dict[str, None]:
        """Read on until the first rollouts have ended (Trends has something to draw)."""
        ended = any(summary.ending is not None for summary in session.index.rollouts.values())
        return {} if ended and not held.is_set() else read_on(records)

    session.index.read_on = read_until_held  # type: ignore[method-assign]
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        status = app.query_one("#status", Static)

        def counts_say_so_far() -> bool:
            cards = list(app.cards.values())
            return bool(cards) and all("so far: run" in card_text(c) for c in cards) and " rollouts so far" in str(status.render())

        await until(pilot, counts_say_so_far, "the cards and the header to say 'so far'")
        assert session.store.rollouts and session.store.partial is not None and not session.index.done
        assert "running" not in str(status.render()).partition("read-only")[0], str(status.render())
        await pilot.press("6")
        await until(pilot, lambda: "so far: indexing" in screen_text(app), "Trends to say 'so far'")
        held.set()
        shown_so_far = lambda: [line for line in screen_text(app).splitlines() if "so far:" in line or "rollouts so far" in line]  # noqa: E731
        await until(pilot, lambda: session.index.done and not shown_so_far(), shown_so_far)
        header = str(status.render())
        assert f"{len(session.store.rollouts)} rollouts" in header and "running" not in header.partition("read-only")[0], header
