"""A large task list in the real app on a real demo server: how long until the first
rows show, until every row is in the table, and from `q` until the app has exited
(every run cancelled, every rollout ended and recorded, the server stopped), for 100,000 tasks
against 100 tasks in the same run. Also reading and validating the tasks file.

    python -m bench.tasks [TASKS]
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from tests.support.polling import until
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.config import load_config
from tracewatch.tui.app import TracewatchApp


def write_config(folder: Path, tasks: int) -> Path:
    lines = (
        json.dumps({"id": f"t{i}", "name": f"task {i}", "prompt": "p", "scenario": "stuck", "kind": "coding"})
        for i in range(tasks)
    )
    (folder / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    config = folder / "tracewatch.toml"
    config.write_text(
        "[[variants]]\n"
        'name = "big"\n'
        f'command = ["{sys.executable}", "-m", "tracewatch.core.demo", "--address", "{{address}}", "--speed", "20"]\n'
        'tasks = "tasks.jsonl"\n'
        'model = "demo-model"\n'
        "grace_seconds = 5.0\n"
    )
    return config


async def measure(tasks: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        config_path = write_config(Path(folder), tasks)
        started = time.perf_counter()
        config = load_config(config_path)
        loaded = time.perf_counter()
        recorder = Recorder(Path(folder) / "session.twrec")
        engine = LiveSession(config, session_dir=Path(folder) / "session", recorder=recorder)
        app = TracewatchApp(engine)
        shown_from = time.perf_counter()
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.table.row_count > 0, "the first rows", timeout=600)
            first = time.perf_counter()
            await until(pilot, lambda: app.table.row_count == tasks, "every row", timeout=600)
            every = time.perf_counter()
            await until(pilot, lambda: engine.variants["big"].pid is not None, "the server", timeout=600)
            pressed = time.perf_counter()
            await pilot.press("q")
            await until(pilot, lambda: app.return_code is not None, "the app to exit", timeout=600)
            quit_at = time.perf_counter()
    return {
        "read+validate": loaded - started,
        "first rows": first - shown_from,
        "every row": every - shown_from,
        "quit": quit_at - pressed,
    }


async def main() -> None:
    large = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    base = await measure(100)
    big = await measure(large)
    print(f"{'':16} {'100 tasks':>10} {f'{large:,} tasks':>15}   ratio")
    for name in base:
        print(f"{name:16} {base[name]:9.3f}s {big[name]:14.3f}s   {big[name] / max(base[name], 1e-6):6.1f}x")


if __name__ == "__main__":
    asyncio.run(main())
