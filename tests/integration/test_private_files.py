"""Everything tracewatch writes is private (folders 0700, files 0600) whatever the
umask: a live session under a home that does not exist yet, its recording, the
supervisor's captures and records, and an episode exported from an opened recording."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.demo_sessions import demo_variant, write_config
from tests.support.polling import until
from tracewatch.core.engine.headless import run_headless
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.paths import default_recording_path
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.config import load_config
from tracewatch.tui.app import TracewatchApp


@pytest.fixture
def umask_000() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def not_private(root: Path) -> dict[str, str]:
    """Every folder under `root` (itself included) that is not 0700, every file not 0600."""
    wrong = {}
    for folder, _dirs, files in os.walk(root):
        for path, want in [(Path(folder), 0o700)] + [(Path(folder) / name, 0o600) for name in files]:
            mode = path.stat().st_mode & 0o777
            if mode != want:
                wrong[str(path.relative_to(root.parent))] = oct(mode)
    return wrong


async def test_every_file_and_folder_is_private_under_umask_000(tmp_path, monkeypatch, umask_000):
    home = tmp_path / "state" / "tracewatch"
    monkeypatch.setenv("TRACEWATCH_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    config = load_config(write_config(tmp_path, [demo_variant("private", ["normal"])]))
    recording = default_recording_path()
    engine = LiveSession(config, recorder=Recorder(recording))
    with open(os.devnull, "w") as quiet:
        assert await run_headless(engine, out=quiet) == 0
    assert {p.name for p in home.iterdir()} == {"sessions", "recordings"}
    assert any(engine.session_dir.rglob("stdout.log")) and recording.exists()

    opened = OpenedRecording(recording)
    app = TracewatchApp(opened)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: "private/0" in opened.store.rollouts, "the recording's rollout")
        app.table.select("private/0")
        await until(pilot, lambda: app.selected == "private/0")
        await pilot.press("e")
        exported = opened.session_dir / "exports" / "private-0.json"
        await until(pilot, exported.exists, "the export")
    assert not_private(tmp_path / "state") == {}
