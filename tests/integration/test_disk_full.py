"""A recording that runs out of disk (a small tmpfs, nearly full) is an error said at
once: headless prints where it stopped as soon as it is noticed and exits 1, the app
raises a notice that stays up and its quit output says where it stopped; the runs it
watched go on either way, and the file keeps every record before the cut."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.demo_sessions import WAIT, demo_variant, write_config
from tests.support.polling import until
from tests.support.repo import REPO
from tracewatch.cli import where_things_went
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.recordings.reader import read_recording
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.config import load_config
from tracewatch.core.session.status import Status
from tracewatch.tui.app import TracewatchApp

FREE = 24 << 10
"""Room left on the disk: the header and the first records fit, the run does not."""
STOPPED = re.compile(r"error: recording to (\S+) stopped after ([\d,]+) records \(([\d,]+) bytes\): No space left on device")


def small_disk(tmp_path: Path, free: int) -> Iterator[Path]:
    """A 1 MiB tmpfs with `free` bytes left."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=700", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        room = os.statvfs(disk)
        (disk / "filler").write_bytes(b"\0" * (room.f_bavail * room.f_frsize - free))
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


@pytest.fixture
def nearly_full_disk(tmp_path: Path) -> Iterator[Path]:
    yield from small_disk(tmp_path, FREE)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    yield from small_disk(tmp_path, 0)


def tasks(count: int) -> list[str]:
    return ["normal"] * count


def test_headless_says_at_once_where_the_recording_stopped_and_exits_1(tmp_path, nearly_full_disk):
    recording = nearly_full_disk / "run.twrec"
    config = write_config(tmp_path, [demo_variant("full", tasks(12))])
    env = {**os.environ, "TRACEWATCH_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "tracewatch.cli", "--headless", str(config), "--record", str(recording)],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=env,
    )  # fmt: skip

    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    said = [i for i, line in enumerate(lines) if STOPPED.match(line)]
    summary = next(i for i, line in enumerate(lines) if line.startswith("full: done;"))
    assert said and said[0] < summary, done.stdout  # said when noticed, and again in the summary
    assert "full: done; 12 done" in lines[summary]  # the runs it watched went on
    path, records, size = STOPPED.match(lines[said[0]]).groups()  # type: ignore[union-attr]
    assert path == str(recording)
    # the batch the disk cut short counts too (before: "0 records (183 bytes)" of a full
    # 1 MiB file): the numbers are the file's, its size and the records it holds whole
    assert int(size.replace(",", "")) == recording.stat().st_size
    assert int(records.replace(",", "")) == len(list(read_recording(recording))) > 0


def test_a_full_disk_at_the_state_folder_names_the_recording_and_leaves_no_empty_file(tmp_path, full_disk):
    """Before: "[Errno 28] No space left on device", no path, and a 0-byte recording left."""
    config = write_config(tmp_path, [demo_variant("full", tasks(1))])
    env = {**os.environ, "TRACEWATCH_HOME": str(full_disk / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "tracewatch.cli", "--headless", str(config)],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=env,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    recordings = full_disk / "home" / "recordings"
    assert re.match(rf"tracewatch: cannot record to {re.escape(str(recordings))}/\S+\.twrec: No space left on device", done.stderr), done.stderr
    assert "--no-record" in done.stderr
    assert not [path for path in (full_disk / "home").rglob("*") if path.is_file()], "nothing left behind"


async def test_the_app_notifies_and_its_quit_output_says_where_recording_stopped(tmp_path, nearly_full_disk):
    recording = nearly_full_disk / "run.twrec"
    config = load_config(write_config(tmp_path, [demo_variant("full", tasks(12))]))
    engine = LiveSession(config, recorder=Recorder(recording), session_dir=tmp_path / "session")
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await until(pilot, lambda: any(n.title == "Recording stopped" for n in app._notifications), "the notice", timeout=WAIT)
        notice = next(n for n in app._notifications if n.title == "Recording stopped")
        assert notice.severity == "error" and "No space left on device" in notice.message
        await until(pilot, lambda: all(r.status is Status.DONE for r in engine.store.rollouts.values()), "the runs", timeout=WAIT)
        await engine.shutdown()
    (line,) = [line for line in where_things_went(engine, recorded=True) if "recording" in line]
    assert STOPPED.match(line) and str(recording) in line
