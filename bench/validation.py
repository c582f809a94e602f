"""What checking every delta at the boundary costs (`tracewatch.core.wire.delta_checks`): the
client's path (decode, check, apply) against the same path with the check left out,
with the first, straightforward check (tests/support/delta_checks_reference.py, the oracle
the fast one is tested against) in its place, and against verifiers 0.4.0's own
assembly, measured in the same process on the streams `bench/assembly.py` uses; and
the check's own time per delta.

    python -m bench.validation [--repeat N]
"""

from __future__ import annotations

import time
from collections.abc import Callable

import tracewatch.core.wire.assembly as assembly_module
from bench.assembly import best_of, ours_pass, over_both_streams, verifiers_pass
from tests.support import delta_checks_reference
from tracewatch.core.wire.delta_checks import check_delta
from tracewatch.core.wire.protocol import unpack_delta


def checked_by(check: Callable[[object, str], None]) -> Callable[[list[bytes]], object]:
    """`ours_pass` with `check` in place of the boundary check."""

    def run(frames: list[bytes]) -> object:
        assembly_module.check_delta = check
        try:
            return ours_pass(frames)
        finally:
            assembly_module.check_delta = check_delta

    return run


def check_alone(frames: list[bytes], repeat: int, check: Callable[[object, str], None] = check_delta) -> float:
    """Best seconds of running only `check` over the decoded deltas."""
    deltas = [unpack_delta(data) for data in frames]
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for delta in deltas:
            check(delta, delta["trace"])
        best = min(best, time.process_time() - start)
    return best


def report(title: str, frames: list[bytes], repeat: int) -> None:
    passes = {
        "verifiers 0.4.0": verifiers_pass,
        "checked": ours_pass,
        "first check": checked_by(delta_checks_reference.check_delta),
        "unchecked": checked_by(lambda delta, trace_id: None),
    }
    best = best_of(passes, frames, repeat)
    alone = check_alone(frames, repeat)
    first_alone = check_alone(frames, repeat, delta_checks_reference.check_delta)
    print(f"\n{title}: {len(frames)} deltas, best of {repeat}")
    for name, seconds in best.items():
        print(
            f"  {name:<16} {len(frames) / seconds:>12,.0f} deltas/s {seconds * 1e3:>9.2f} ms   "
            f"speed vs verifiers {best['verifiers 0.4.0'] / seconds:.2f}x"
        )
    print(
        f"  time vs unchecked: checked {best['checked'] / best['unchecked']:.3f}x, "
        f"first check {best['first check'] / best['unchecked']:.3f}x   "
        f"the check alone: {alone / len(frames) * 1e6:.2f} us per delta "
        f"(first check {first_alone / len(frames) * 1e6:.2f} us), "
        f"{alone / best['unchecked'] * 100:.1f}% of decoding and applying"
    )


def main() -> None:
    over_both_streams(__doc__, report)


if __name__ == "__main__":
    main()
