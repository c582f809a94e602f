"""The memory `tracewatch open` holds for a big verifiers run directory, against the
size of its `traces.jsonl` and against a bare read of the same file.

The file is the demo's training rollouts (nodes with token ids, masks and every
per-token stream, as verifiers writes them), each line a fresh episode id, until the
file is about `--size-mb`. Each measure runs in a fresh interpreter after the imports
it needs, and reports the growth of its peak resident set (`ru_maxrss`) past what the
imports took:

- bare: every line through `json.loads`, each let go (the floor for any reader that
  parses the file);
- open: `open_folder` on the run directory, what `open`, `compare`, `tokens` and
  `export --trace-events` build first (every episode in the store, packed).

    python -m bench.run_dir_memory [--size-mb 200 --rounds 2]

The aim is that `open` never holds twice the file. The file goes in a temporary
folder under /tmp and is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.repo import REPO
from tests.support.training_session import training_episode

MEASURES = {
    "bare": """
import json, sys
def read(path):
    with open(path + "/traces.jsonl", "rb") as file:
        for line in file:
            json.loads(line)
""",
    "open": """
from tracewatch.core.engine.opened import open_folder
def read(path):
    open_folder(path)
""",
}
PROBE = """
import resource, sys, time
{setup}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cpu = time.process_time()
read(sys.argv[1])
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.process_time() - cpu)
"""


def write_run(folder: Path, size_mb: float) -> int:
    """A run directory of about `size_mb` MB; returns how many episodes it holds."""
    episodes = [asyncio.run(training_episode(seed)) for seed in range(1, 5)]
    lines = [json.dumps(episode) for episode in episodes]
    count = written = 0
    with open(folder / "traces.jsonl", "w") as file:
        while written < size_mb * 1e6:
            episode = episodes[count % len(episodes)]
            line = lines[count % len(lines)].replace(episode["id"], f"{count:032x}") + "\n"
            file.write(line)
            written += len(line)
            count += 1
    return count


def measure(name: str, run: Path) -> tuple[float, float]:
    """(peak growth in bytes, CPU seconds) of one measure, in a fresh interpreter."""
    env = {**os.environ, "TRACEWATCH_HOME": str(run.parent / "home"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(setup=MEASURES[name]), str(run)],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    before, peak, cpu = done.stdout.split()
    return (int(peak) - int(before)) * 1024, float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tracewatch-run-dir-memory-"))
    try:
        run = folder / "run"
        run.mkdir()
        count = write_run(run, args.size_mb)
        size = (run / "traces.jsonl").stat().st_size
        print(f"traces.jsonl: {size / 1e6:.0f} MB, {count} episodes")
        ratios: dict[str, list[float]] = {name: [] for name in MEASURES}
        for round_ in range(args.rounds):
            for name in MEASURES:
                grown, cpu = measure(name, run)
                ratios[name].append(grown / size)
                print(f"round {round_ + 1} {name:>5}: peak +{grown / 1e6:.0f} MB = {grown / size:.2f}x the file; {cpu:.1f} CPU s; load {os.getloadavg()[0]:.1f}")
        bare, opened = statistics.median(ratios["bare"]), statistics.median(ratios["open"])
        print(f"medians: open holds {opened:.2f}x the file at its peak; a bare read {bare:.2f}x (one line at a time)")
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
