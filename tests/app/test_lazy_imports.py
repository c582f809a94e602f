"""Starting tracewatch loads neither numpy nor tokenizers: the token view brings them when
it first opens, so a session that never looks at tokens does not pay their import.
Checked in a fresh interpreter running the real app on a training recording."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from tests.support.repo import REPO
from tests.support.training_session import training_deltas, write_training_recording

PROGRAM = """
import asyncio, json, sys
from pathlib import Path

import tracewatch.cli  # what the command imports before it knows which session it runs
from tracewatch.core.engine.opened import OpenedRecording
from tests.support.polling import until
from tracewatch.tui.app import TracewatchApp

HEAVY = ("numpy", "tokenizers")


def loaded():
    return [name for name in HEAVY if name in sys.modules]


async def main():
    seen = {"imported": loaded()}
    app = TracewatchApp(OpenedRecording(Path(sys.argv[1])))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count == 1)
        app.table.select("trainer/0")
        await until(pilot, lambda: app.trace_pane.transcript.trace_state is not None)
        seen["shown"] = loaded()
        await pilot.press("t")
        await until(pilot, lambda: type(app.screen).__name__ == "TokenScreen" and app.screen.lines.tokens is not None)
        seen["tokens"] = loaded()
    print(json.dumps(seen))


asyncio.run(main())
"""


def test_numpy_and_tokenizers_load_with_the_token_view_not_at_startup(tmp_path: Path) -> None:
    recording = tmp_path / "training.twrec"
    write_training_recording(recording, asyncio.run(training_deltas()))
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(recording)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"imported": [], "shown": [], "tokens": ["numpy", "tokenizers"]}
