"""The session without a screen: one line per rollout event worth reading (started,
finished, failed, cancelled, stalled), variant state changes, and a summary.

Exit status 0 only when every rollout finished without error and the recording holds
all of it, so a CI job or a script can rely on it; a recording that stopped (disk full)
is said the moment it is noticed. Ctrl-C (SIGINT), SIGTERM or SIGHUP cancels every run,
stops every server, prints what ended and the summary, and exits 128+signal (130 for
Ctrl-C), with no traceback; a second one kills the servers still stopping at once.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Iterable
from typing import TextIO

from tracewatch.core.engine.ending_signals import ENDING_SIGNALS, leave_hung_up_terminal
from tracewatch.core.run.durations import seconds_text
from tracewatch.core.session.contracts import SessionView, VariantState, VariantView
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.stall_cancels import StallCancels
from tracewatch.core.session.status import Status
from tracewatch.core.text import say

POLL_SECONDS = 0.2


def rollout_line(rollout: Rollout, now: float) -> str:
    text = f"{rollout.key} [{rollout.task_label}] {rollout.status.value}"
    if rollout.status.finished:
        reward = "-" if rollout.reward is None else f"{rollout.reward:g}"
        text += f" · reward {reward} · {rollout.turns} turns · {'-' if rollout.tokens is None else rollout.tokens} tokens · {seconds_text(rollout.elapsed(now))}"
    if rollout.reason:
        text += f" · {rollout.reason}"
    return text


async def run_headless(
    session: SessionView, out: TextIO | None = None, cancel_stalled: float | None = None
) -> int:
    """Run every variant to the end, printing to `out` (standard output as it is at
    the call); with `cancel_stalled`, a rollout silent for that many seconds is
    cancelled rather than waited on forever."""
    out = out if out is not None else sys.stdout
    store = session.store
    progress = _Progress(session, out, StallCancels(session, cancel_stalled))
    interrupts = _Interrupts(session, out)
    loop = asyncio.get_running_loop()
    for signum in ENDING_SIGNALS:
        loop.add_signal_handler(signum, interrupts.on_signal, signum)
    stopping = loop.create_task(interrupts.stop.wait())
    settle: asyncio.Task[None] | None = None
    try:
        await session.start()
        settle = loop.create_task(session.wait())
        while not settle.done() and not interrupts.stop.is_set():
            progress.report()
            await asyncio.wait({settle, stopping}, timeout=POLL_SECONDS, return_when=asyncio.FIRST_COMPLETED)
        progress.report()
    finally:
        await session.shutdown()  # a second signal still kills while this waits
        for signum in ENDING_SIGNALS:
            loop.remove_signal_handler(signum)
        for task in (settle, stopping):
            if task is not None:
                task.cancel()
    progress.report()
    for line in summary_lines(session):
        say(out, line)
    if interrupts.received:
        return 128 + interrupts.received[0]
    ok = store.rollouts and all(r.status in (Status.DONE, Status.UNOBSERVED) for r in store.rollouts.values())
    return 0 if ok and session.recording_stopped is None else 1


class _Interrupts:
    """The first ending signal ends the session cleanly (a proxy runs until told to
    stop); a second kills what is still being stopped."""

    def __init__(self, session: SessionView, out: TextIO) -> None:
        self.session = session
        self.out = out
        self.received: list[signal.Signals] = []
        self.stop = asyncio.Event()

    def on_signal(self, signum: signal.Signals) -> None:
        if signum is signal.SIGHUP:
            leave_hung_up_terminal()
        if self.received:
            say(self.out, f"{signum.name} again: killing the servers still stopping")
            for variant in self.session.variants.values():
                if variant.state is VariantState.CANCELLING:
                    variant.cancel()
            return
        self.received.append(signum)
        say(self.out, f"{signum.name}: {stop_words(list(self.session.variants.values()), self.session.quit_warning)}")
        self.stop.set()


def stop_words(variants: list[VariantView], costs: str | None) -> str:
    """What a stop does, in the words of what runs here: servers and evals of ours are
    cancelled and stopped; a proxy or a relay viewer only stops watching, and what that
    costs others (`costs`: a proxy's drivers lose their route) is said."""
    ours = [variant.name for variant in variants if variant.cancel_unavailable is None]
    watched = [variant for variant in variants if variant.cancel_unavailable is not None]
    said = []
    if ours:
        whose = "every run" if not watched else f"the runs of {', '.join(ours)}"
        said.append(f"cancelling {whose} and stopping {'every server' if not watched else 'their servers'} (again to kill them now)")
    if watched:
        said.append(f"stopping the viewer; {costs or 'the runs it watches go on'}")
    return "; ".join(said)


class _Progress:
    """What has been printed so far, so that each change is printed once."""

    def __init__(self, session: SessionView, out: TextIO, cancels: StallCancels) -> None:
        self.session = session
        self.out = out
        self.cancels = cancels
        self.seen: dict[str, Status] = {}
        self.states: dict[str, str] = {}
        self.flagged: set[str] = set()
        self.told_recording_stopped = False
        self.lost: dict[str, str | None] = {}

    def report(self) -> None:
        """What changed since the last look, in the order it happened: a variant that
        began something (starting, cancelling) before its rollouts' lines, one that
        settled (done, cancelled, failed) after them."""
        store = self.session.store
        changes = store.take_changes()
        now = store.clock()
        self._variants(changes.variants, settled=False)
        self._sources(changes.variants)
        self._rollouts(changes.rollouts, now)
        self._stalled(now)
        self._variants(changes.variants, settled=True)
        self._recording()

    def _recording(self) -> None:
        stopped = self.session.recording_stopped
        if stopped is not None and not self.told_recording_stopped:
            self.told_recording_stopped = True
            say(self.out, f"error: {stopped}")

    def _variants(self, names: set[str], settled: bool) -> None:
        for name in sorted(names):
            variant = self.session.variants.get(name)
            if variant is None or self.states.get(name) == variant.state.value or variant.state.settled != settled:
                continue
            self.states[name] = variant.state.value
            reason = f" · {variant.reason}" if variant.reason else ""
            say(self.out, f"{name}: {variant.state.value}{reason}")

    def _sources(self, names: set[str]) -> None:
        """A tap's source that stopped answering said once, and again when it answers."""
        for name in sorted(names):
            variant = self.session.variants.get(name)
            lost = variant.source_lost if variant is not None else None
            if lost != self.lost.get(name):
                if lost is not None or self.lost.get(name) is not None:
                    say(self.out, f"{name}: {lost or 'its source answers again'}")
                self.lost[name] = lost

    def _rollouts(self, keys: Iterable[str], now: float) -> None:
        for key in keys:
            rollout = self.session.store.rollouts[key]
            if rollout.status is Status.QUEUED or rollout.waiting or self.seen.get(key) == rollout.status:
                continue  # a rollout waiting for a slot is said to run once it begins
            self.seen[key] = rollout.status
            say(self.out, rollout_line(rollout, now))

    def _stalled(self, now: float) -> None:
        """Each stalled rollout said once, and its cancel when `cancels` made one."""
        for rollout in self.session.store.stalled(now):
            idle = rollout.idle(now)
            label = f"{rollout.key} [{rollout.task_label}]"
            if rollout.key not in self.flagged:
                self.flagged.add(rollout.key)
                say(self.out, f"{label} stalled: no delta for {idle:.0f}s")
            if self.cancels.cancel(rollout, now):
                say(self.out, f"{label} cancelling: silent for {idle:.0f}s")


def summary_lines(session: SessionView) -> list[str]:
    lines = []
    for name, variant in session.variants.items():
        stats = session.store.stats(name)
        counts = ", ".join(f"{count} {status}" for status, count in stats.counts.items() if count)
        reward = "n/a" if stats.mean_reward is None else f"{stats.mean_reward:.3f}"
        line = f"{name}: {variant.state.value}; {counts or 'no rollouts'}; mean reward {reward}"
        if variant.reason:
            line += f"; {variant.reason}"
        lines.append(line)
    if (partial := session.store.partial) is not None:  # stopped before an opened recording was read whole
        lines.append(f"partial: {partial}: the counts and rewards above are of what was read")
    if session.store.dropped_frames:
        lines.append(f"frames dropped: {session.store.dropped_frames} (last: {session.store.last_drop})")
    if session.recording_stopped is not None:
        lines.append(f"error: {session.recording_stopped}")
    elif session.recording_path is not None:
        lines.append(f"recording: {session.recording_path}")
    if session.truncated is not None:
        lines.append(f"note: {session.truncated}")
    return lines
