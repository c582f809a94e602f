"""Runs with made-up but deterministic timing, for the views of a whole run (timeline,
trends) and their benchmark: rollouts queue for a few slots, pass through every span
with model calls and harness time between them, and some fail or are cancelled;
whatever has not ended by `now` is left running or queued, its open span growing."""

from __future__ import annotations

import hashlib
import heapq
import random

from tests.support.tui_standin import StandInEngine, StandInVariant
from tracewatch.core.session.status import Ending, Status
from tracewatch.core.session.store import RolloutStore

NOW = 1_764_500_000.0
"""The frozen clock of `timed_engine`."""


def timed_run(store: RolloutStore, variant: str, count: int, start: float, now: float, slots: int = 4, seed: int = 0) -> list[str]:
    rng = random.Random(f"{variant}-{seed}")
    free = [start] * slots
    keys = []
    for index in range(count):
        key = f"{variant}/{index}"
        keys.append(key)
        store.add_rollout(variant, index % 5, {"name": f"task {index % 5}"}, index // 5, key=key, t=start)
        begin = heapq.heappop(free)
        if begin >= now:
            heapq.heappush(free, begin)
            continue
        store.started(key, f"req-{key}", begin)
        edges, calls, t = {}, [], begin + rng.uniform(0.05, 0.3)
        for phase in ("boot", "setup"):
            edges[phase] = (t, t + rng.uniform(0.3, 2.0))
            t = edges[phase][1]
        agent_start = t
        for _ in range(rng.randint(2, 6)):
            calls.append((t, t + rng.uniform(0.5, 4.0)))
            t = calls[-1][1] + rng.uniform(0.2, 1.5)
        edges["agent"] = (agent_start, t)
        for phase, seconds in (("finalize", 0.4), ("scoring", rng.uniform(0.3, 1.2))):
            edges[phase] = (t, t + seconds)
            t += seconds
        failed, cancelled = index % 7 == 3, index % 11 == 5
        end = min(t, edges["agent"][0] + 2.5) if failed or cancelled else t
        timing = {
            phase: {"start": a, "end": b if b <= min(now, end) else 0.0}
            for phase, (a, b) in edges.items()
            if a < min(now, end)
        }
        if "agent" in timing:
            model = sum(b - a for a, b in calls if b <= now)
            timing["agent"].update({"model": {"duration": model}, "harness": {"duration": max(0.0, t - agent_start - model)}})
        made = [(a, b) for a, b in calls if b <= min(now, end)]
        nodes = [node for _ in made for node in ({"message": {"role": "user"}}, {"message": {"role": "assistant"}, "sampled": True})]
        status = Status.FAILED if failed else Status.CANCELLED if cancelled else Status.DONE
        trace = hashlib.sha1(key.encode()).hexdigest()[:16]
        store.apply_delta(key, {"trace": trace, "open": {"id": trace}}, begin)  # its trace is minted as it begins
        delta = {
            "trace": trace,
            "nodes": nodes,
            "calls": [{"node": 2 * n + 1, "time": {"start": a, "end": b}} for n, (a, b) in enumerate(made)],
            "set": {
                "timing": timing, "num_total_tokens": 400 * len(made), "ok": end <= now and status is Status.DONE,
                "rewards": {"r": {"score": round(rng.random(), 2)}} if status is Status.DONE else {},
            },
        }
        if failed and end <= now:
            delta["errors"] = [{"type": "ToolError", "message": "the sandbox went away"}]
        store.apply_delta(key, delta, min(now, end))
        if end <= now:
            store.ended(key, Ending(status, None if status is Status.DONE else f"{status.value} on purpose"), t=end)
        heapq.heappush(free, end)
    return keys


def timed_engine(count: int = 12, slots: int = 3) -> StandInEngine:
    """Two variants' timed runs 40 s in at a frozen clock, behind a stand-in session."""
    store = RolloutStore(clock=lambda: NOW)
    for variant in ("baseline", "candidate"):
        timed_run(store, variant, count, NOW - 40.0, NOW, slots=slots)
    return StandInEngine(store, {name: StandInVariant(name, store) for name in store.variants})
