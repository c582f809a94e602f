"""The engine without a screen: one line per rollout event worth reading (started,
finished, failed, cancelled, stalled), variant state changes, and a summary.

Exit status 0 only when every rollout finished without error, so a CI job or a
script can rely on it. Ctrl-C (SIGINT) or SIGTERM cancels every run, stops every
server, prints what ended and the summary, and exits 128+signal (130 for Ctrl-C), with
no traceback; a second one kills the servers still stopping at once.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TextIO

from core.session.contracts import SessionView, VariantState
from core.session.store import Rollout, Status

POLL_SECONDS = 0.2


def rollout_line(rollout: Rollout, now: float) -> str:
    text = f"{rollout.key} [{rollout.task_label}] {rollout.status.value}"
    if rollout.status.finished:
        reward = "-" if rollout.reward is None else f"{rollout.reward:g}"
        text += f" · reward {reward} · {rollout.turns} turns · {rollout.tokens} tokens · {rollout.elapsed(now):.1f}s"
    if rollout.reason and rollout.status is not Status.DONE:
        text += f" · {rollout.reason}"
    return text


async def run_headless(
    engine: SessionView, out: TextIO | None = None, cancel_stalled: float | None = None
) -> int:
    """Run every variant to the end, printing to `out` (standard output as it is at
    the call); with `cancel_stalled`, a rollout silent for that many seconds is
    cancelled rather than waited on forever."""
    out = out if out is not None else sys.stdout
    store = engine.store
    seen: dict[str, Status] = {}
    states: dict[str, str] = {}
    flagged: set[str] = set()
    cancelled: set[str] = set()
    if cancel_stalled is not None:
        store.stall_seconds = min(store.stall_seconds, cancel_stalled)
    loop = asyncio.get_running_loop()
    interrupted: list[signal.Signals] = []
    stop = asyncio.Event()

    def on_signal(signum: signal.Signals) -> None:
        """The first SIGINT/SIGTERM ends the session cleanly (a proxy runs until told to
        stop); a second kills what is still being stopped."""
        if interrupted:
            print(f"{signum.name} again: killing the servers still stopping", file=out, flush=True)
            for variant in engine.variants.values():
                if variant.state is VariantState.CANCELLING:
                    variant.cancel()
            return
        interrupted.append(signum)
        print(
            f"{signum.name}: cancelling every run and stopping every server (again to kill them now)",
            file=out, flush=True,
        )  # fmt: skip
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)

    def report_variants(names: set[str], settled: bool) -> None:
        for name in sorted(names):
            variant = engine.variants.get(name)
            if variant is None or states.get(name) == variant.state.value or variant.state.settled != settled:
                continue
            states[name] = variant.state.value
            reason = f" · {variant.reason}" if variant.reason else ""
            print(f"{name}: {variant.state.value}{reason}", file=out, flush=True)

    def report() -> None:
        """What changed since the last look, in the order it happened: a variant that
        began something (starting, cancelling) before its rollouts' lines, one that
        settled (done, cancelled, failed) after them."""
        changes = store.take_changes()
        now = store.clock()
        report_variants(changes.variants, settled=False)
        for key in changes.rollouts:
            rollout = store.rollouts[key]
            if rollout.status is Status.QUEUED or seen.get(key) == rollout.status:
                continue
            seen[key] = rollout.status
            print(rollout_line(rollout, now), file=out, flush=True)
        for rollout in store.stalled(now):
            idle = rollout.idle(now)
            label = f"{rollout.key} [{rollout.task_label}]"
            if rollout.key not in flagged:
                flagged.add(rollout.key)
                print(f"{label} stalled: no delta for {idle:.0f}s", file=out, flush=True)
            if cancel_stalled is not None and idle >= cancel_stalled and rollout.key not in cancelled:
                cancelled.add(rollout.key)
                engine.cancel_rollout(rollout.key)
                print(f"{label} cancelling: silent for {idle:.0f}s", file=out, flush=True)
        report_variants(changes.variants, settled=True)

    stopping = loop.create_task(stop.wait())
    settle: asyncio.Task[None] | None = None
    try:
        await engine.start()
        settle = loop.create_task(engine.wait())
        while not settle.done() and not stop.is_set():
            report()
            await asyncio.wait({settle, stopping}, timeout=POLL_SECONDS, return_when=asyncio.FIRST_COMPLETED)
        report()
    finally:
        await engine.shutdown()  # a second signal still kills while this waits
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        for task in (settle, stopping):
            if task is not None:
                task.cancel()
    report()
    for line in summary_lines(engine):
        print(line, file=out, flush=True)
    if interrupted:
        return 128 + interrupted[0]
    ok = store.rollouts and all(r.status is Status.DONE for r in store.rollouts.values())
    return 0 if ok else 1


def summary_lines(engine: SessionView) -> list[str]:
    lines = []
    for name, variant in engine.variants.items():
        stats = engine.store.stats(name)
        counts = ", ".join(f"{count} {status}" for status, count in stats.counts.items() if count)
        reward = "n/a" if stats.mean_reward is None else f"{stats.mean_reward:.3f}"
        line = f"{name}: {variant.state.value}; {counts or 'no rollouts'}; mean reward {reward}"
        if variant.reason:
            line += f"; {variant.reason}"
        lines.append(line)
    if engine.store.dropped_frames:
        lines.append(f"frames dropped: {engine.store.dropped_frames} (last: {engine.store.last_drop})")
    if engine.recording_path is not None:
        lines.append(f"recording: {engine.recording_path}")
    if engine.truncated is not None:
        lines.append(f"note: {engine.truncated}")
    return lines
