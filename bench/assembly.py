"""How fast tracewatch turns delta frames into episodes, against verifiers 0.4.0's own
client path measured in the same process, and against a bare `msgpack.unpackb` loop
(the floor: no assembly can be cheaper than decoding its input).

Two streams: the recorded verifiers 0.4.0 stream (tests/fixtures, seven real runs,
repeated for stable timings) and a synthetic long rollout (200 turns whose nodes
carry 4,000 token ids, mask and logprobs each, as a trainer's server sends them).
Each pass decodes every frame and applies it to a fresh assembly, as a client does.
Then `apply` alone, on the same frames decoded before the clock starts, each
assembly given what its own reader makes of them (ours: token arrays kept packed and
each node and call with the bytes it came in as, as the client and a recording's
read-back decode them; and, for the cost of packing them again, plain lists).

    python -m bench.assembly [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import io
import random
import time
from collections.abc import Callable

import msgpack
from verifiers.v1.serve.delta import EpisodeAssembly as VerifiersAssembly
from verifiers.v1.serve.delta import unpack as verifiers_unpack

from tests.support.repo import FIXTURE as RECORDED
from tracewatch.core.wire.assembly import EpisodeAssembly
from tracewatch.core.wire.protocol import unpack, unpack_delta

FIXTURE = RECORDED / "deltas.msgpack"


def recorded_frames(copies: int) -> list[bytes]:
    """The fixture's frames, split at their msgpack boundaries; each copy gets its own
    trace ids so copies build separate traces rather than one overlong one."""
    data = FIXTURE.read_bytes()
    unpacker = msgpack.Unpacker(io.BytesIO(data), raw=False, strict_map_key=False)
    frames, start = [], 0
    for _ in unpacker:
        end = unpacker.tell()
        frames.append(data[start:end])
        start = end
    out = []
    for copy in range(copies):
        for frame in frames:
            delta = unpack(frame)
            delta["trace"] = f"{delta['trace']}-{copy}"
            out.append(msgpack.packb(delta, use_bin_type=True))
    return out


def synthetic_frames(turns: int = 200, tokens: int = 4000) -> list[bytes]:
    """One long rollout: per turn a preview, then the tool and assistant nodes with
    their token spans, the model call and the changed scalars."""
    rng = random.Random(0)
    trace = "synthetic"

    def node(index: int, role: str) -> dict:
        return {
            "parent": index - 1 if index else None,
            "semantic_parents": [],
            "message": {"role": role, "content": f"turn {index} " * 20},
            "sampled": role == "assistant",
            "timestamp": 1.7e9 + index,
            "token_ids": [rng.randrange(150_000) for _ in range(tokens)],
            "mask": [rng.random() < 0.5 for _ in range(tokens)],
            "logprobs": [-rng.random() * 5 for _ in range(tokens)],
            "routed_experts": None,
        }

    header = {"version": 1, "id": trace, "verifiers": {"version": "0.4.0", "commit": None}, "task": {"type": "T"}}
    frames = [{"trace": trace, "open": header, "set": {"ok": False, "timing": {"start": 1.7e9}}}]
    for turn in range(turns):
        preview = [{"role": "tool", "content": f"result {turn}"}]
        frames.append({"trace": trace, "pending": preview})
        frames.append(
            {
                "trace": trace,
                "nodes": [node(2 * turn, "tool"), node(2 * turn + 1, "assistant")],
                "calls": [{"node": 2 * turn + 1, "usage": {"prompt_tokens": tokens, "completion_tokens": tokens}}],
                "set": {"num_total_tokens": 2 * tokens * (turn + 1), "timing": {"start": 1.7e9, "turn": turn}},
            }
        )
    return [msgpack.packb(frame, use_bin_type=True) for frame in frames]


def floor_pass(frames: list[bytes]) -> None:
    for data in frames:
        msgpack.unpackb(data, raw=False, strict_map_key=False)


def kept_floor_pass(frames: list[bytes]) -> list:
    """Decoding while keeping every delta alive, as any assembly must: allocating
    without reusing freed memory is a cost of its own, paid by both assemblies."""
    return [msgpack.unpackb(data, raw=False, strict_map_key=False) for data in frames]


def ours_pass(frames: list[bytes]) -> EpisodeAssembly:
    """What the client does: token arrays stay packed, nodes and calls come with their
    bytes (`unpack_delta`)."""
    assembly = EpisodeAssembly()
    for data in frames:
        assembly.apply(unpack_delta(data))
    return assembly


def verifiers_pass(frames: list[bytes]) -> VerifiersAssembly:
    assembly = VerifiersAssembly()
    for data in frames:
        assembly.apply(verifiers_unpack(data))
    return assembly


def best_of(passes: dict[str, Callable[[list[bytes]], object]], frames: list[bytes], repeat: int) -> dict[str, float]:
    """Best CPU time of this process per pass (other processes on a loaded box steal
    wall time, not CPU time), interleaving the contenders so that what noise remains
    hits them alike. GC is paused while timing, and what a pass built is freed after
    its clock stops: freeing is not part of assembling."""
    best = dict.fromkeys(passes, float("inf"))
    for _ in range(repeat):
        for name, run in passes.items():
            gc.collect()
            gc.disable()
            start = time.process_time()
            built = run(frames)
            elapsed = time.process_time() - start
            del built
            gc.enable()
            best[name] = min(best[name], elapsed)
    return best


def apply_alone(frames: list[bytes], repeat: int) -> dict[str, float]:
    """Best CPU time of `apply` alone per contender, alternated; every round decodes
    the frames afresh (an assembly keeps what a delta holds) before its clock starts."""
    contenders: dict[str, tuple[Callable[[bytes], object], Callable[[], object]]] = {
        "verifiers 0.4.0": (verifiers_unpack, VerifiersAssembly),
        "tracewatch": (unpack_delta, EpisodeAssembly),
        "arrays as lists": (unpack, EpisodeAssembly),
    }
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(repeat):
        for name, (decode, assembly_type) in contenders.items():
            deltas = [decode(data) for data in frames]
            assembly = assembly_type()
            apply = assembly.apply  # type: ignore[attr-defined]
            gc.collect()
            gc.disable()
            start = time.process_time()
            for delta in deltas:
                apply(delta)
            elapsed = time.process_time() - start
            del assembly, deltas
            gc.enable()
            best[name] = min(best[name], elapsed)
    return best


def report_apply(title: str, frames: list[bytes], repeat: int) -> None:
    best = apply_alone(frames, repeat)
    print(f"\n{title}, apply alone: {len(frames)} deltas, best of {repeat}")
    for name, seconds in best.items():
        print(f"  {name:<16} {seconds / len(frames) * 1e6:>8.2f} us/delta {seconds * 1e3:>9.2f} ms")
    ours = best["tracewatch"]
    print(
        f"  speed ours / verifiers: {best['verifiers 0.4.0'] / ours:.2f}x   "
        f"arrays as lists / verifiers: {best['verifiers 0.4.0'] / best['arrays as lists']:.2f}x"
    )


def report(title: str, frames: list[bytes], repeat: int) -> None:
    passes = {
        "floor (unpackb)": floor_pass,
        "unpackb, kept": kept_floor_pass,
        "verifiers 0.4.0": verifiers_pass,
        "tracewatch": ours_pass,
    }
    best = best_of(passes, frames, repeat)
    megabytes = sum(map(len, frames)) / 1e6
    print(f"\n{title}: {len(frames)} deltas, {megabytes:.2f} MB, best of {repeat}")
    for name, seconds in best.items():
        print(f"  {name:<16} {len(frames) / seconds:>12,.0f} deltas/s {megabytes / seconds:>9.1f} MB/s {seconds * 1e3:>9.2f} ms")
    ours = best["tracewatch"]
    print(
        f"  speed ours / verifiers: {best['verifiers 0.4.0'] / ours:.2f}x   "
        f"ours / floor: {best['floor (unpackb)'] / ours:.2f}x   "
        f"ours / kept floor: {best['unpackb, kept'] / ours:.2f}x"
    )


def over_both_streams(doc: str, *reports: Callable[[str, list[bytes], int], None]) -> None:
    """The command line of a bench of passes over frames: each report over the recorded
    stream and over the synthetic rollout of 4,000-token nodes (fewer passes: each is long)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="timed passes per contender (best is kept)")
    parser.add_argument("--copies", type=int, default=50, help="copies of the recorded stream per pass")
    args = parser.parse_args()
    for report_on in reports:
        report_on(f"recorded verifiers 0.4.0 stream x{args.copies}", recorded_frames(args.copies), args.repeat)
        report_on("synthetic 200-turn rollout, 4,000-token nodes", synthetic_frames(), max(5, args.repeat // 2))


def main() -> None:
    over_both_streams(__doc__, report, report_apply)


if __name__ == "__main__":
    main()
