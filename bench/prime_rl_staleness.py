"""The in-flight transcript's staleness in the real app (`App.run_test`) following a
prime-rl run at scale: from a delta line appended to a live trace's file to its text
drawn in the transcript, against the app's poll interval (`POLL_SECONDS`, the floor a
follower that polls cannot beat) in the same run.

A synthetic run is written under a temporary folder (deleted at the end): `--rows`
finished episodes (`bench.prime_rl.write_run`: index, sealed chunks, annotations) and
`--live` files in `traces/live/` as prime-rl's orchestrator writes them (its `open`
delta first, the dispatch identity as its last key, then a root and an assistant turn,
each line followed by a blank line). The app follows it as `tracewatch open RUN` does
(`FollowedRun(follow=True, columns=True)`, 160x50). Once every finished and every live
row is in, one live rollout is opened as a user does (cursor on its row, Enter); then
`--appends` times, about a second apart, a writer thread appends one assistant turn to
its file (and one to each of `--growing` other live files, so the follower has work
beside it), and the staleness is the time from that append to the turn's text in the
transcript's drawn lines (looked at every few ms), p50/p95/max. It is measured twice:

- while the app still reads the finished records for their steps
  (`FollowedRun._scan_steps`, slices of the loop between polls; the index carries no
  step), if it still does when every row is in;
- caught up, after the idle following is measured: the CPU the whole process used over
  `--quiet` seconds with nothing written, as a share of one core.

    python -m bench.prime_rl_staleness [--rows 100000 --live 1024 --appends 20]

Figures and the load average are printed; docs/performance.md keeps them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from textual.geometry import Region

from bench.prime_rl import write_run
from tracewatch.core.engine.followed_run import POLL_SECONDS, FollowedRun
from tracewatch.core.recordings.prime_rl.layout import StreamRun, find_run
from tracewatch.tui.app import TracewatchApp

DEADLINE = 30.0
"""Seconds a turn may take to be drawn before the bench gives up on it."""


def turn_line(trace: str, parent: int, role: str, text: str) -> bytes:
    """One node's delta line as verifiers' `DeltaStreamer` makes it and prime-rl's
    monitor appends it (every field of a `MessageNode`; a blank line after it)."""
    sampled = role == "assistant"
    tokens = list(range(10, 74))
    node = {
        "parent": parent if parent >= 0 else None, "semantic_parents": [],
        "message": {"role": role, "content": text, **({"reasoning_content": None, "tool_calls": None, "provider_state": None} if sampled else {})},
        "sampled": sampled, "timestamp": time.time(), "token_ids": tokens, "mask": [sampled] * len(tokens), "is_content": [],
        "logprobs": [-0.25] * len(tokens) if sampled else [], "advantages": None, "reference_logprobs": None,
        "trainer_logprobs": None, "entropies": None, "loss_weights": None, "routed_experts": None, "sampling_mask": None,
    }
    return orjson.dumps({"trace": trace, "nodes": [node]}) + b"\n\n"


def live_files(live: Path, count: int) -> list[str]:
    """`count` in-flight traces, each an open delta with its dispatch, a user prompt and
    one assistant turn; their trace ids."""
    live.joinpath("pending").mkdir(parents=True)
    traces = []
    now = time.time()
    for number in range(count):
        trace = uuid.uuid4().hex
        dispatch = {"id": f"d-{number:05d}", "kind": "train", "env": "gsm8k", "group": f"g{number // 8}", "task": f"task {number}", "policy_version": 3, "step": 3, "started": now}
        opening = {
            "trace": trace, "open": {"version": 1, "id": trace, "verifiers": {"version": "0.4.0", "commit": None}, "task": {"type": "T", "data": {"idx": number, "name": f"task {number}"}}},
            "set": {"timing": {"start": now, "setup": {"start": now, "end": now}, "agent": {"start": now, "end": 0.0}}}, "dispatch": dispatch,
        }
        body = orjson.dumps(opening) + b"\n\n" + turn_line(trace, -1, "user", "solve it") + turn_line(trace, 0, "assistant", "a first thought")
        (live / f"{trace}.jsonl").write_bytes(body)
        traces.append(trace)
    return traces


class Writer(threading.Thread):
    """Appends a turn to the watched trace and to each growing one every `every`
    seconds, rounds `first` to `first + rounds - 1`; `appended[n]` is when the watched
    trace's turn of the n-th of them was written. `nodes` (each trace's next node) is
    shared by the writers of one run."""

    def __init__(self, live: Path, watched: str, growing: list[str], nodes: dict[str, int], first: int, rounds: int, every: float) -> None:
        super().__init__(daemon=True)
        self.live, self.watched, self.growing, self.nodes = live, watched, growing, nodes
        self.first, self.rounds, self.every = first, rounds, every
        self.appended: list[float] = []
        self.drawn = threading.Event()
        """Set by the watcher once a turn is drawn: the next round may start."""

    def run(self) -> None:
        for round_ in range(self.first, self.first + self.rounds):
            self.drawn.clear()
            started = time.monotonic()
            for trace in self.growing:
                self._append(trace, f"another turn {round_}")
            self._append(self.watched, marker(round_))
            self.appended.append(time.perf_counter())
            self.drawn.wait(DEADLINE)
            time.sleep(max(0.0, self.every - (time.monotonic() - started)))

    def _append(self, trace: str, text: str) -> None:
        index = self.nodes.get(trace, 2)
        with open(self.live / f"{trace}.jsonl", "ab") as file:
            file.write(turn_line(trace, index - 1, "tool", "42") + turn_line(trace, index, "assistant", text))
        self.nodes[trace] = index + 2


def marker(round_: int) -> str:
    return f"the answer of round {round_:03d}"


async def follow(layout: StreamRun, live: Path, traces: list[str], args: argparse.Namespace) -> dict[str, Any]:
    found: dict[str, Any] = {}
    start = time.perf_counter()
    session = FollowedRun(layout, follow=True, columns=True)
    app = TracewatchApp(session)
    async with app.run_test(size=(160, 50)) as pilot:
        table, store = app.table, session.store

        def live_rows() -> int:
            return sum(1 for rollout in store.rollouts.values() if not rollout.status.finished and rollout.primary is not None and len(rollout.primary.nodes) >= 2)

        deadline = time.monotonic() + 600
        while table.row_count < args.rows + args.live or live_rows() < args.live:
            assert time.monotonic() < deadline, f"rows {table.row_count}, live rows {live_rows()}"
            await pilot.pause(0.05)
        found["every row"] = time.perf_counter() - start

        watched = traces[len(traces) // 2]
        key = next(key for key, rollout in store.rollouts.items() if watched in rollout.traces)
        table.focus()
        table.select(key)
        await pilot.pause(0.1)
        await pilot.press("enter")
        transcript = app.trace_pane.transcript
        while transcript.trace_state is not store.rollouts[key].primary:
            await pilot.pause(0.01)

        def screen() -> list[str]:
            return [strip.text for strip in transcript.render_lines(Region(0, 0, transcript.size.width, transcript.size.height))]

        others = [trace for trace in traces if trace != watched][: args.growing]
        nodes: dict[str, int] = {}

        async def staleness(first: int) -> list[float]:
            writer = Writer(live, watched, others, nodes, first, args.appends, args.every)
            writer.start()
            samples = []
            for n in range(args.appends):
                while len(writer.appended) <= n:
                    await asyncio.sleep(0.001)
                appended, text = writer.appended[n], marker(first + n)
                while not any(text in line for line in screen()):
                    waited = time.perf_counter() - appended
                    assert waited < DEADLINE, f"{text!r} not drawn after {waited:.1f} s; the transcript's last lines: {screen()[-5:]}"
                    await pilot.pause(0.005)
                samples.append(time.perf_counter() - appended)
                writer.drawn.set()
            writer.join()
            return samples

        if (session.run.table.column("dispatch_step") < 0).any():  # the records still read for their steps
            found["staleness while the steps are read"] = await staleness(0)
            found["steps unknown after it"] = int(np.count_nonzero(session.run.table.column("dispatch_step") < 0))
        while (session.run.table.column("dispatch_step") < 0).any() and time.monotonic() < deadline:
            await pilot.pause(0.1)
        found["steps read"] = time.perf_counter() - start

        await pilot.pause(2 * POLL_SECONDS)
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.sleep(args.quiet)
        found["idle cpu"] = (time.process_time() - cpu) / (time.perf_counter() - wall)
        found["staleness"] = await staleness(args.appends)
    await session.shutdown()
    return found


def report(when: str, samples: list[float], args: argparse.Namespace) -> None:
    samples = sorted(samples)
    p50, p95 = statistics.median(samples), samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    print(
        f"staleness {when}, a turn appended to its transcript drawn, {len(samples)} appends ({args.growing} other files growing): "
        f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max {samples[-1] * 1000:.0f} ms (aim p95 <= 1 s); "
        f"over the poll interval ({POLL_SECONDS * 1000:.0f} ms): p50 {p50 / POLL_SECONDS:.2f}x, p95 {p95 / POLL_SECONDS:.2f}x, max {samples[-1] / POLL_SECONDS:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--live", type=int, default=1024)
    parser.add_argument("--growing", type=int, default=100, help="other live files growing a turn each round")
    parser.add_argument("--appends", type=int, default=20)
    parser.add_argument("--every", type=float, default=1.0, help="seconds between rounds")
    parser.add_argument("--quiet", type=float, default=5.0, help="seconds of idle following measured")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tw-prime-stale-"))
    try:
        print(f"load average at the start: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
        written, chunks = write_run(folder / "out", args.rows, 64 << 20)
        layout = find_run(folder / "out")
        assert isinstance(layout, StreamRun)
        traces = live_files(layout.traces / "live", args.live)
        print(f"wrote {args.rows:,} episodes in {chunks} sealed chunks and {args.live:,} live traces ({written:.1f} s)")
        found = asyncio.run(follow(layout, layout.traces / "live", traces, args))
        print(f"every row in: {found['every row']:.1f} s; every record's step read: {found['steps read']:.1f} s")
        if "staleness while the steps are read" in found:
            report("while the records are read for their steps", found["staleness while the steps are read"], args)
            print(f"  ({found['steps unknown after it']:,} rows' steps still unread when it ended)")
        print(f"idle following ({args.live:,} live traces, nothing written, {args.quiet:.0f} s): {found['idle cpu'] * 100:.1f}% of one core (aim <= 10%)")
        report("caught up", found["staleness"], args)
        print(f"load average at the end: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
