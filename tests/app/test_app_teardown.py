"""No timer, worker or message touches a widget that is gone: widgets removed under
the app (as quitting removes them, one by one, while ticks and messages still run)
are left alone, and a crash of the app exits non-zero."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.app_screen import more_ticks
from tests.support.polling import until
from tests.support.tui_standin import make_engine
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.table.rollouts_table import RolloutsTable


async def test_ticks_and_logs_leave_removed_widgets_alone() -> None:
    engine = make_engine(finish=False)
    app = TracewatchApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(RolloutsTable)
        await until(pilot, lambda: table.row_count > 0)
        key = next(iter(engine.store.rollouts))
        table.select(key)
        await until(pilot, lambda: app.selected == key)
        # what quitting does, one widget at a time: the detail pane's children first
        await app.trace_pane.remove_children()
        await app.logs.remove_children()
        engine.store.failed(key, "changed after its transcript was removed")
        app.logs.poll(visible=True)
        await more_ticks(app, pilot, 41, "the app ticking over the removed widgets")
        assert app.return_code is None, "the app did not crash"


TERMINAL_MODES = re.compile(rb"\x1b\[\?(25|1049|1000|1003|1006|2004)([hl])")
"""Cursor shown, alternate screen, mouse reporting, bracketed paste: set on start."""


@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a real terminal")
def test_a_crash_exits_non_zero_and_leaves_the_terminal_clean(tmp_path: Path) -> None:
    """A bug in the app (here: one planted in its once-a-second redraw) ends it with
    status 1 and the traceback, and every terminal mode it set is reset: the last
    word on each, in what reached the terminal, is "off" (the cursor: "shown")."""
    recording = tmp_path / "empty.twrec"
    Recorder(recording).close()
    plant = "import sys; from tracewatch.tui.app import TracewatchApp as A; A._second = lambda self: 1 / 0; from tracewatch.cli import main; sys.exit(main())"
    command = shlex.join(["env", f"TRACEWATCH_HOME={tmp_path / 'home'}", sys.executable, "-c", plant, "replay", str(recording)])
    log = tmp_path / "terminal.log"
    done = subprocess.run(["script", "-q", "-e", "-c", command, str(log)], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    output = log.read_bytes()
    assert done.returncode == 1, output[-2000:]
    assert b"ZeroDivisionError" in output
    last = {mode: state for mode, state in TERMINAL_MODES.findall(output)}
    assert last == {b"25": b"h", b"1049": b"l", b"1000": b"l", b"1003": b"l", b"1006": b"l", b"2004": b"l"}
