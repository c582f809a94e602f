"""Quitting with every rollout in flight: the real engine (store, recorder, client)
attached to `bench/live.py`'s socket-speed source, shut down while 5,000 runs stream,
against 256 in the same run. Prints each shutdown step's time: cancelling the runs over
the wire, waiting for their replies, stopping the dispatch, closing the client and the
recorder.

    python -m bench.quit [--rollouts 5000 --baseline 256]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.live import Source, capture, engine_for
from tracewatch.core.session.variant import Variant
from tracewatch.core.wire.client import EnvClient

STEPS = {"stop variant": (Variant, "_cancel"), "close client": (EnvClient, "close")}
"""Steps timed inside the quit: the variant's stop (cancel every run over the wire, wait
for their aborted replies, end the rest here) and closing its client."""


def timed(steps: dict[str, float]) -> None:
    """Mark when each step first starts and last ends: its span, however many calls."""
    for name, (owner, attribute) in STEPS.items():
        original = getattr(owner, attribute)

        async def wrapper(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            started = time.perf_counter()
            steps.setdefault(_name + " first", started)
            try:
                return await _original(*args, **kwargs)
            finally:
                steps[_name + " last"] = time.perf_counter()

        setattr(owner, attribute, wrapper)


async def measure(address: str, rollouts: int) -> dict[str, float]:
    marks: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        engine = engine_for(address, rollouts, 200, 100, Path(scratch))
        await engine.start()
        store = engine.store
        while sum(1 for r in store.rollouts.values() if r.deltas) < rollouts:
            await asyncio.sleep(0.05)
        timed(marks)
        started = time.perf_counter()
        await engine.shutdown()
        ended = time.perf_counter()
        endings = sum(1 for r in store.rollouts.values() if r.status.finished)
    spans = {name: marks.get(name + " last", started) - marks.get(name + " first", started) for name in STEPS}
    return {"quit": ended - started, **spans, "ended rollouts": endings}


def run(frames: Path, rollouts: int) -> dict[str, float]:
    source = Source(frames)
    try:
        return asyncio.run(measure(source.address, rollouts))
    finally:
        source.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=5_000)
    parser.add_argument("--baseline", type=int, default=256)
    args = parser.parse_args()
    originals = {name: getattr(owner, attribute) for name, (owner, attribute) in STEPS.items()}
    with tempfile.TemporaryDirectory() as scratch:
        frames = Path(scratch) / "frames.msgpack"
        capture(frames, 32, 200, 100)
        results = {}
        for size in (args.baseline, args.rollouts):
            for name, (owner, attribute) in STEPS.items():
                setattr(owner, attribute, originals[name])
            results[size] = run(frames, size)
    base, large = results[args.baseline], results[args.rollouts]
    print(f"{'shutdown step (s)':<20}{args.baseline:>10,}{args.rollouts:>10,}{'ratio':>9}")
    for step in base:
        print(f"{step:<20}{base[step]:>10.3f}{large[step]:>10.3f}{large[step] / max(base[step], 1e-6):>8.1f}x")


if __name__ == "__main__":
    main()
