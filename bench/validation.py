"""What checking every delta at the boundary costs (`core.wire.delta_checks`): the
client's path (decode, check, apply) against the same path with the check left out,
measured in the same process on the streams `bench/assembly.py` uses, and the check's
own time per delta.

    python bench/validation.py [--repeat N]
"""

from __future__ import annotations

import argparse
import time

from assembly import best_of, ours_pass, recorded_frames, synthetic_frames

import core.wire.assembly as assembly_module
from core.wire.delta_checks import check_delta
from core.wire.protocol import unpack_delta


def unchecked_pass(frames: list[bytes]) -> object:
    """`ours_pass` with the boundary check replaced by nothing."""
    assembly_module.check_delta = lambda delta, trace_id: None
    try:
        return ours_pass(frames)
    finally:
        assembly_module.check_delta = check_delta


def check_alone(frames: list[bytes], repeat: int) -> float:
    """Best seconds of running only the check over the decoded deltas."""
    deltas = [unpack_delta(data) for data in frames]
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for delta in deltas:
            check_delta(delta, delta["trace"])
        best = min(best, time.process_time() - start)
    return best


def report(title: str, frames: list[bytes], repeat: int) -> None:
    best = best_of({"checked": ours_pass, "unchecked": unchecked_pass}, frames, repeat)
    alone = check_alone(frames, repeat)
    print(f"\n{title}: {len(frames)} deltas, best of {repeat}")
    for name, seconds in best.items():
        print(f"  {name:<10} {len(frames) / seconds:>12,.0f} deltas/s {seconds * 1e3:>9.2f} ms")
    print(
        f"  checked / unchecked time: {best['checked'] / best['unchecked']:.3f}x   "
        f"the check alone: {alone / len(frames) * 1e6:.2f} us per delta, "
        f"{alone / best['unchecked'] * 100:.1f}% of decoding and applying"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="timed passes per contender (best is kept)")
    parser.add_argument("--copies", type=int, default=50, help="copies of the recorded stream per pass")
    args = parser.parse_args()
    report(f"recorded verifiers 0.4.0 stream x{args.copies}", recorded_frames(args.copies), args.repeat)
    report("synthetic 200-turn rollout, 4,000-token nodes", synthetic_frames(), max(5, args.repeat // 2))


if __name__ == "__main__":
    main()
