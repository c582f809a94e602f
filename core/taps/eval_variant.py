"""A variant that is an eval run: `vf-eval ...` under our supervisor, with the tap in
`tracewatch_guest/inject/` on its PYTHONPATH streaming every in-process rollout back.

The child pushes the tap framing (`tracewatch_guest.framing`) to a PULL socket bound
here on 127.0.0.1: each run's begin, deltas and reply, and where vf-eval writes its
traces.jsonl (`run_dir`). The eval is ours to stop (SIGTERM, grace, SIGKILL; vf-eval exits 130
on SIGTERM: cancelled). One rollout is not: vf-eval's runner (`gather_rollouts`)
cancels every rollout when one of them ends by an exception, a cancel included.

A viewer that was stopped or slow has messages dropped for it by the tap (its queue
is bounded): the tap's `loss` names the runs, and the runs whose end was dropped end
here as *unobserved*, view incomplete, while the runs still live go on. What the tap
still held at its exit, if the viewer did not read it in time, is discarded there:
the tap's `closed` says how many messages it had queued, so the count of what never
came is known once the eval exited and its last messages were read.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from tracewatch.core.paths import file_name, private_dir
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.variant_life import CapturedChild
from tracewatch.core.supervision.capture import tail_lines
from tracewatch.core.supervision.child import ChildError, SupervisedChild
from tracewatch.core.taps.drain import STOP_SECONDS, SocketQueue, left_unread
from tracewatch.core.taps.loss import apply_loss, read_loss
from tracewatch.core.taps.tap_variant import TapVariant
from tracewatch.core.wire.protocol import unpack
from tracewatch_guest import inject
from tracewatch_guest.framing import ADDRESS_VAR, CLOSED, LOSS, RUN_DIR, TAPPED, Message, decode

INJECT_DIR = Path(inject.__file__).resolve().parent
RECEIVE_QUEUE = 100_000
QUIET_AFTER_EXIT = 0.3
"""After the eval exits, what it sent last is awaited until this long passes without a message."""
WHOSE = "the eval's"
"""Whom a run the view lost belongs to: the view's loss is no failure of the eval's."""
EXITED_AT_ONCE = 5.0
"""An eval that ends this soon after its start, without a rollout, "exited at once"."""

ROLLOUT_CANCEL_UNAVAILABLE = (
    "vf-eval runs its rollouts with gather_rollouts, which cancels every rollout when one "
    "ends by an exception (a cancel included): cancelling one would end the whole eval. "
    "Cancel the variant (x) to stop the eval."
)


class EvalVariant(TapVariant, CapturedChild):
    child_name = "eval"
    rollout_cancel_unavailable = ROLLOUT_CANCEL_UNAVAILABLE
    cancel_words = (
        "vf-eval gets SIGTERM: it tears its rollouts down and exits 130 (cancelled), "
        "its rollouts end cancelled with it; SIGKILL if it is still there after the grace period."
    )
    cancel_unavailable = None
    health_left = None
    supervised = True

    def __init__(
        self,
        name: str,
        argv: list[str],
        store: RolloutStore,
        session_dir: Path,
        recorder: Any = None,
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        grace_seconds: float = 10.0,
        deadline_seconds: float = 86400.0,
        finish_without_viewer: bool = False,
    ) -> None:
        super().__init__(name, store, recorder)
        self.argv = argv
        self.session_dir = session_dir
        self.cwd = cwd
        self.env = env or {}
        self.grace_seconds = grace_seconds
        self.deadline_seconds = deadline_seconds
        self.finish_without_viewer = finish_without_viewer
        """`on_viewer_exit = "finish"`: if tracewatch dies, the eval runs on and writes its results."""
        self.run_dir: str | None = None
        self.outcome_text: str | None = None
        self.dropped = 0
        """Tap messages the view missed: dropped by the tap, or discarded at its exit unread."""
        self._received = 0
        self._closings: list[Message] = []
        """The tap's word at each tapped process's exit, read once the eval exited."""
        self.unread = 0
        """Tap messages still queued when a cancel's bounded read ended (counted, not read)."""
        self._cancelled_at = math.inf
        self._child: SupervisedChild | None = None
        self._starts = 0
        self.tapped: list[int] = []
        """The pids of the eval's processes whose verifiers Env the tap wrapped."""

    # -- what the UI reads ---------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """vf-eval's pid while it runs; None before its supervisor started (it is being
        started in a worker thread while the cards redraw), and after it exited."""
        child = self._child
        if child is None or child.pid is None or child.poll() is not None:
            return None
        return child.server_pid

    def log_tail(self, n: int = 200) -> list[str]:
        """vf-eval's own stdout and stderr as captured, live and after it ended (a
        tap's log would be its notes, and the eval tap writes none: its news is runs)."""
        return CapturedChild.log_tail(self, n)

    def log_size(self) -> int:
        return CapturedChild.log_size(self)

    @property
    def address(self) -> str | None:
        return f"run dir {self.run_dir}" if self.run_dir else " ".join(self.argv)[:200]

    @property
    def status_line(self) -> str | None:
        parts = [f"run dir {self.run_dir} (tracewatch open it)"] if self.run_dir else []
        if self.dropped:
            parts.append(f"{self.dropped:,} tap messages dropped (the eval went on)")
        if wholeness := self.runs.wholeness():
            parts.append(wholeness)
        return " · ".join(parts) or None

    # -- commands --------------------------------------------------------------------

    def start(self) -> None:
        if not self.can_start:
            return
        self.reason = self.outcome_text = None
        self.unread = self.dropped = self._received = 0
        self._closings = []
        self.tapped = []
        self._cancelled_at = math.inf
        self.escalation = []
        self._kill_now = False
        self._starts += 1
        self._set(VariantState.STARTING)
        self._main = asyncio.get_running_loop().create_task(self._run(), name=f"eval {self.name}")

    def _begin_cancel(self) -> None:
        """SIGTERM to the eval (vf-eval tears down and exits 130)."""
        self._set(VariantState.CANCELLING)
        self._cancelled_at = time.monotonic()
        self._stopping = asyncio.get_running_loop().create_task(self._stop(self.grace_seconds))

    def cancel_rollout(self, key: str) -> bool:
        return False

    # -- one run of the eval ------------------------------------------------------

    async def _run(self) -> None:
        context = zmq.asyncio.Context()
        pull = context.socket(zmq.PULL)
        pull.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
        pull.setsockopt(zmq.LINGER, 0)
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        queue = SocketQueue(pull)
        receiver = asyncio.get_running_loop().create_task(queue.read_forever(self._handle))
        started = time.monotonic()
        try:
            child = await self._launch(f"tcp://127.0.0.1:{port}")
            self._set(VariantState.RUNNING)
            code = await asyncio.to_thread(child.wait)
            await self._read_after_exit(queue, receiver)
            if self.state is VariantState.CANCELLING:
                return  # `_stop` reports how it ended
            self._apply_closings()
            outcome = child.outcome()
            self.outcome_text = f"exit code {outcome.exit_code} · {outcome.status}"
            self._event("exited", code=code, status=str(outcome.status))
            saw_a_run = bool(self.runs.keys or self.store.variants[self.name])
            if code != 0:
                at_once = time.monotonic() - started < EXITED_AT_ONCE and not saw_a_run
                self.reason = self._exit_reason(code, "at once" if at_once else "")
            elif not saw_a_run:
                self.reason = self._no_rollout_reason()
            self.runs.end_all(self.reason or "the eval ended before this rollout replied")
            failed = self.reason is not None
            self.reason = "; ".join(filter(None, [self.reason, self.view_loss, self.runs.wholeness()])) or None
            self._set(VariantState.FAILED if failed else VariantState.DONE)
        except (ChildError, OSError) as error:
            self.reason = str(error)
            self._set(VariantState.FAILED)
        finally:
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await receiver
            pull.close(linger=0)
            context.term()

    async def _launch(self, tap_address: str) -> SupervisedChild:
        run_dir = private_dir(self.session_dir / file_name(f"{self.name}-{self._starts}"))
        self.stdout_path, self.stderr_path = run_dir / "stdout.log", run_dir / "stderr.log"
        env = {**os.environ, **self.env, ADDRESS_VAR: tap_address}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(INJECT_DIR), env.get("PYTHONPATH")]))
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._child = SupervisedChild(
            argv=self.argv,
            cwd=self.cwd or Path.cwd(),
            env=env,
            stdout_path=self.stdout_path,
            stderr_path=self.stderr_path,
            record_path=run_dir / "supervisor.json",
            deadline_seconds=self.deadline_seconds,
            supervisor_grace_seconds=max(0.5, self.grace_seconds * 0.6),
            label=self.name,
            finish_without_app=self.finish_without_viewer,
        )
        pid = await asyncio.to_thread(self._child.start)
        self.server_started_at = time.time()
        self._event("started", pid=pid, argv=list(self.argv))
        return self._child

    async def _read_after_exit(self, queue: SocketQueue, receiver: asyncio.Task[None]) -> None:
        """What the eval sent just before it exited is still on its way: an eval that
        ended by itself is read to its last message, a cancelled one for
        `STOP_SECONDS` from its exit or from the cancel, whichever came later (a cancel
        during this read brings the end forward); what is left then is counted."""
        receiver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await receiver
        exited = time.monotonic()
        self.unread = await queue.read_at_stop(self._handle, lambda: max(exited, self._cancelled_at) + STOP_SECONDS, QUIET_AFTER_EXIT)

    @property
    def view_loss(self) -> str | None:
        """What this view says of the tap messages it missed (runs, card, summary)."""
        return f"the eval's tap dropped {self.dropped:,} messages for this view" if self.dropped else None

    def _handle(self, frames: list[bytes]) -> None:
        message = decode(frames)
        if message is None:
            return
        if message.kind == CLOSED:  # on a socket of its own: it may come before what the tap sent last
            self._closings.append(message)
            return
        self._received += 1
        if message.dropped is not None and message.dropped > self.dropped:
            self.dropped = message.dropped
            self.store.touch_variant(self.name)
        try:
            if self.runs.message(message.kind, message.run, message.payload):
                return
            if message.kind == LOSS:
                self._apply_loss(message.payload)
            elif message.kind == RUN_DIR:
                self.run_dir = str(unpack(message.payload).get("path"))
                self._event("run_dir", path=self.run_dir)
                self.store.touch_variant(self.name)
            elif message.kind == TAPPED:
                pid = unpack(message.payload).get("pid")
                self.tapped.append(pid if isinstance(pid, int) else 0)
        except Exception as error:  # one odd message must not stop the view of the rest
            self.runs.lose(message.run, f"a tap message could not be read: {error!r}")

    def _apply_loss(self, payload: bytes, closed: str | None = None) -> None:
        if (loss := read_loss(payload)) is not None:
            apply_loss(self.runs, loss, self.view_loss or "", WHOSE, closed)

    def _apply_closings(self) -> None:
        """Once the eval exited and what it sent was read: what the tap queued and
        never came was discarded at its exit (the viewer was stopped or slow), so the
        runs whose end is among what was lost end here, view incomplete. A tap that
        lost nothing changes nothing (another process of the eval's runs are not its)."""
        sent = 0
        for message in self._closings:
            loss = read_loss(message.payload) or {}
            sent += loss["sent"] if type(loss.get("sent")) is int else 0
            self.dropped = max(self.dropped, message.dropped or 0)
        self.dropped += max(0, sent - self._received)
        if not self.dropped:
            return
        self.store.touch_variant(self.name)
        for message in self._closings:
            if message.dropped or sent > self._received:
                self._apply_loss(message.payload, closed="the eval exited")

    # -- stopping ------------------------------------------------------------------

    async def _stop(self, grace: float) -> None:
        child = self._child
        if child is None:
            self._set(VariantState.CANCELLED)
            return
        await self._terminate(child, grace)
        if self._main is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(self._main)
        outcome = child.outcome()
        self.outcome_text = f"exit code {outcome.exit_code} · {outcome.status}"
        self._event("exited", code=outcome.exit_code, status=str(outcome.status))
        self.runs.end_all("cancelled with the eval", cancelled=True)
        if self.unread:
            self.reason = f"the view {left_unread(self.unread, 'tap messages')} (its runs end cancelled anyway)"
        self._set(VariantState.CANCELLED)

    # -- bookkeeping ---------------------------------------------------------------

    def _no_rollout_reason(self) -> str:
        """Why an eval that ended well showed nothing: the tap never met verifiers'
        Env, or met it and saw it run nothing."""
        if not self.tapped:
            return (
                "no rollout reached tracewatch: no process of the eval imported verifiers' Env with the tap "
                "in place (is it a verifiers v1 eval? the tap needs the PYTHONPATH tracewatch sets, and a "
                "python run without -S or -I)"
            )
        pids = ", ".join(map(str, self.tapped[:5]))
        return f"no rollout reached tracewatch: the tap wrapped verifiers' Env (pid {pids}) but it ran no rollout"

    def _exit_reason(self, code: int, when: str) -> str:
        tail = tail_lines(self.stderr_path, 8) if self.stderr_path is not None else []
        last = " | ".join(line.strip() for line in tail if line.strip() and not line.startswith("# tracewatch"))
        text = f"{self.argv[0]} exited with code {code}" + (f" {when}" if when else "")
        return text + (f": {last}" if last else "")
