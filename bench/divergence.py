"""What side by side's comparison costs while two long traces stream, measured in one
process: two rollouts of a task fed turn by turn into a real store (a tool result of a
few KB and a reply with a call per turn, parting at turn 120), the screen's look taken
after each landing and on idle ticks (it looks four times a second). Three contenders,
in alternated rounds, each timed on its own calls only:

- store: the store applying the turns (what a live session pays for them anyway);
- incremental: one `TurnPairs` judging the pairs that became whole at each look;
- from scratch: every look judging every whole pair again (a new `TurnPairs` each time).

    python -m bench.divergence [--turns 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from typing import Any

from tracewatch.core.session.divergence import TurnPairs
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.trace_state import TraceState

OUTPUT = "".join(f"line {n}: some output of the tool, as a test run or a file prints it\n" for n in range(60))
IDLE_LOOKS = 3
"""Looks with nothing new between two landings."""


def turn(index: int, parts: bool) -> list[dict[str, Any]]:
    argument = -index if parts and index >= 120 else index
    call = {"id": f"c{index}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": f"run {argument}"})}}
    reply = {"role": "assistant", "content": f"Step {index}: running it.", "tool_calls": [call], "reasoning_content": "thinking " * 40}
    return [{"message": {"role": "tool", "content": OUTPUT, "tool_call_id": f"c{index - 1}"}}, {"message": reply, "sampled": True}]


def one_round(turns: int, look: str) -> tuple[float, float, int]:
    """CPU seconds in the store and in the looks, and the first differing turn found."""
    store = RolloutStore(clock=lambda: 0.0)
    keys, sent = [], [0, 0]
    for variant in ("a", "b"):
        key = store.add_rollout(variant, 0, {"name": "t"}, 0).key
        store.started(key, key, t=0.0)
        store.apply_delta(key, {"trace": f"t-{variant}", "open": {"id": f"t-{variant}"}}, t=0.0)
        keys.append(key)
    traces: list[TraceState] = [store.rollouts[key].primary for key in keys]  # type: ignore[misc]
    pairs = TurnPairs(*traces)
    in_store = in_looks = 0.0
    for index in range(turns):
        for side in (0, 1):
            nodes = [dict(n, parent=sent[side] + i - 1 if sent[side] + i else None) for i, n in enumerate(turn(index, side == 1))]
            start = time.process_time()
            store.apply_delta(keys[side], {"trace": traces[side].id, "nodes": nodes}, t=0.0)
            in_store += time.process_time() - start
            sent[side] += len(nodes)
            start = time.process_time()
            for _ in range(1 + IDLE_LOOKS):
                if look == "from scratch":
                    pairs = TurnPairs(*traces)
                pairs.update(False, False)
            in_looks += time.process_time() - start
    return in_store, in_looks, pairs.first or 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for look in ("incremental", "from scratch"):
            gc.collect()
            in_store, in_looks, first = one_round(args.turns, look)
            assert first == 121, first
            best["store"] = min(best.get("store", in_store), in_store)
            best[look] = min(best.get(look, in_looks), in_looks)
    looks = args.turns * 2 * (1 + IDLE_LOOKS)
    print(f"two {args.turns}-turn traces, {looks} looks, best of {args.rounds} alternated rounds (CPU time); load {os.getloadavg()[0]:.1f}")
    for name, seconds in best.items():
        print(f"  {name:13} {seconds * 1e3:8.1f} ms  {seconds / best['store']:6.2f}x the store's")
    print(f"  from scratch / incremental: {best['from scratch'] / best['incremental']:.0f}x")


if __name__ == "__main__":
    main()
