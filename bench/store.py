"""What the store adds on top of the assembly for each delta, measured in one process:
decode + assemble (the client's own work, the baseline) against decode + assemble +
derive (turns, phase, activity, changed-set), on the recorded verifiers stream and on
a long synthetic rollout with token arrays. Also the cost of one UI look
(`take_changes`) after a burst, at 100 and 5,000 rollouts.

    python -m bench.store
"""

from __future__ import annotations

import gc
import time

from bench.assembly import recorded_frames, synthetic_frames
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.wire.assembly import EpisodeAssembly
from tracewatch.core.wire.protocol import unpack


def assemble_only(frames: list[bytes]) -> None:
    assemblies: dict[str, EpisodeAssembly] = {}
    for frame in frames:
        delta = unpack(frame)
        assemblies.setdefault(delta["trace"], EpisodeAssembly()).apply(delta)


def assemble_and_derive(frames: list[bytes]) -> None:
    store = RolloutStore()
    keys: dict[str, str] = {}
    for frame in frames:
        delta = unpack(frame)
        key = keys.get(delta["trace"])
        if key is None:
            key = keys[delta["trace"]] = store.add_rollout("bench", len(keys), {}).key
            store.started(key, key)
        store.apply_delta(key, delta)


def best(fn, frames: list[bytes], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn(frames)
        times.append(time.perf_counter() - start)
    return min(times)


def look_cost(rollouts: int, burst: int = 100, repeat: int = 50) -> float:
    """One tick's read of the changed-set after `burst` rollouts changed."""
    store = RolloutStore()
    keys = [store.add_rollout("bench", i, {}).key for i in range(rollouts)]
    store.take_changes()
    total = 0.0
    for round_ in range(repeat):
        for key in keys[round_ % 7 :: max(1, rollouts // burst)][:burst]:
            store.cancelling(key)
        start = time.perf_counter()
        changes = store.take_changes()
        for key in changes.rollouts:
            store.rollouts[key].activity(store.clock())
        total += time.perf_counter() - start
    return total / repeat


def main() -> None:
    for name, frames in (("recorded x200", recorded_frames(200)), ("synthetic 200 turns x 4k tokens", synthetic_frames())):
        base = best(assemble_only, frames)
        derived = best(assemble_and_derive, frames)
        rate = len(frames) / derived
        print(f"{name}: {len(frames)} deltas; assemble {base * 1e3:.1f} ms, assemble+store {derived * 1e3:.1f} ms "
              f"({rate:,.0f} deltas/s); store overhead ratio {derived / base:.2f}")
    small, large = look_cost(100), look_cost(5000)
    print(f"take_changes after a 100-rollout burst: {small * 1e6:.0f} us at 100 rollouts, "
          f"{large * 1e6:.0f} us at 5,000; ratio {large / small:.2f}")


if __name__ == "__main__":
    main()
