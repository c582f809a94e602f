"""One variant's life: its env server (supervised child or attached address), its
tasks dispatched with bounded concurrency, and every run's deltas into the store.

The lifecycle is an explicit state machine; `start` and `cancel` are safe in any
state. A server found dead (its process exited, or it missed health checks in a row)
fails every rollout it owns at once, queued ones included, so nothing waits on a
reply that cannot come and nothing more is sent to it. Every way out of a run ends
its rollout exactly once, with a reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracewatch.core.errors import TracewatchError
from tracewatch.core.paths import file_name, private_dir
from tracewatch.core.ports import LOOPBACK, PORT_ATTEMPTS, PortsTaken, free_port, port_taken
from tracewatch.core.session.config import VariantConfig
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.variant_life import CapturedChild
from tracewatch.core.supervision.capture import tail_lines
from tracewatch.core.supervision.child import ChildError, ChildOutcome, SupervisedChild
from tracewatch.core.wire.assembly import AssemblyError
from tracewatch.core.wire.client import EnvClient, RunFailed, ServerGone, new_request_id
from tracewatch.core.wire.probe import probe
from tracewatch.core.wire.protocol import MalformedReply, WireDelta

logger = logging.getLogger(__name__)

HEALTH_INTERVAL = 2.0
HEALTH_TIMEOUT = 5.0
HEALTH_MISSES = 3
"""A server that misses this many health checks in a row is dead: an attached one
(no supervisor tells us it died) or a child that is stopped (SIGSTOP) or wedged."""

CHILD_POLL = 0.2
"""How often a supervised child's exit is looked for: an exit is noticed at once."""

QUEUE_CHUNK = 1000
"""Rollouts queued per turn of the event loop: the first rows of a 100,000-task list
show at once, and the screen stays live while the rest are queued."""

START_CHUNK = 64
"""Runs started per turn of the event loop: starting thousands at once holds the loop
(and the screen, the first rows) for as long as they all take to start."""

CANCEL_REPLY_WAIT = 2.0
"""How long a cancel waits for the aborted run's reply (or a variant cancel for its
runs' replies) before it ends the rollout here regardless."""

CANCEL_ANSWER_WAIT = 10.0
"""How long a rollout cancel waits for the server to answer the cancel itself."""


class AttachFailed(TracewatchError, RuntimeError):
    """What listens at an attached address is not an env server."""


class ServerExited(TracewatchError, RuntimeError):
    pass


class Variant(CapturedChild):
    child_name = "server"
    cancel_unavailable = None
    rollout_cancel_unavailable = None
    cancel_words = None
    status_line = None

    def __init__(
        self,
        config: VariantConfig,
        store: RolloutStore,
        session_dir: Path,
        recorder: Any = None,
    ) -> None:
        super().__init__(config.name, store, recorder)
        self.config = config
        self.session_dir = session_dir
        self.address: str | None = None
        self.health_left: float | None = None
        self.outcome_text: str | None = None
        self._child: SupervisedChild | None = None
        self._client: EnvClient | None = None
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._cancels: set[asyncio.Task[None]] = set()
        self._gone: str | None = None
        self._starts = 0

    # -- what the UI reads ---------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The server's own pid (not its supervisor's) while it runs; None before it
        started, after it exited, and for an attached server."""
        child = self._child
        if child is None or child.pid is None:
            return None
        return child.server_pid if child.poll() is None else None

    @property
    def supervised(self) -> bool:
        """Whether the server is ours to stop (a command we start), not one attached to."""
        return self.config.attach is None

    @property
    def child(self) -> SupervisedChild | None:
        """The supervised server of the latest start (None when attached or never
        started): its pid, outcome and supervisor record."""
        return self._child

    @property
    def model(self) -> str | None:
        return self.config.model

    @property
    def sampling(self) -> dict[str, Any]:
        return self.config.sampling.model_dump(exclude_none=True)

    def log_tail(self, n: int = 200) -> list[str]:
        if not self.supervised:
            return [f"(attached to {self.address or self.config.attach}: its output stays where it runs; tracewatch only captures servers it starts)"]
        return super().log_tail(n)

    # -- commands --------------------------------------------------------------

    def start(self) -> None:
        """Start a fresh server and a fresh round of the variant's rollouts."""
        if not self.can_start:
            return
        self.reason = self.outcome_text = None
        self._child = None  # a fresh start must never report the last child's outcome
        self.escalation = []
        self._kill_now = False
        self._gone = None
        self._set(VariantState.STARTING)
        self._starts += 1
        upcoming = (
            (task_index, task_data, rollout_index)
            for task_index, task_data in enumerate(self.config.task_list())
            for rollout_index in range(self.config.rollouts_per_task)
        )
        keys = self._queue_rollouts(upcoming)
        self._main = asyncio.get_running_loop().create_task(self._run(keys, upcoming), name=f"variant {self.name}")

    def _begin_cancel(self) -> None:
        """Cancel the runs over the wire, then stop the server (SIGTERM, grace, SIGKILL)."""
        self._set(VariantState.CANCELLING)
        self._stopping = asyncio.get_running_loop().create_task(self._cancel())

    def cancel_rollout(self, key: str) -> bool:
        """Ask the server to abort the run, once: a rollout already cancelling (by an
        earlier call or with its variant) is left to that cancel."""
        rollout = self.store.rollouts.get(key)
        if rollout is None or rollout.status.finished:
            return False
        if rollout.status is Status.CANCELLING:
            return True
        task = self._runs.get(key)
        if rollout.status is Status.QUEUED or task is None:
            self._end(key, "cancelled before it started", cancelled=True)
            return True
        self._cancelling(key)
        task = asyncio.get_running_loop().create_task(self._cancel_run(key, rollout.request_id))
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)
        return True

    # -- the life of one start ----------------------------------------------------

    async def _run(self, keys: list[str], upcoming: Iterator[tuple[int, dict[str, Any], int]]) -> None:
        watchdog: asyncio.Task[None] | None = None
        try:
            while more := self._queue_rollouts(upcoming):  # a long task list: the rest, a turn at a time
                keys += more
                await asyncio.sleep(0)
            address = await self._up()
            self.health_left = None
            self._event("healthy", address=address)
            self._set(VariantState.RUNNING)
            watchdog = asyncio.get_running_loop().create_task(self._watch_server(keys))
            await self._dispatch(keys)
            if self._gone is not None:
                self.reason = self._gone
            elif keys and all(self.store.rollouts[k].status is not Status.DONE for k in keys):
                self.reason = "every rollout failed"
            await self._stop_server()
            self._set(VariantState.FAILED if self.reason else VariantState.DONE)
        except Exception as error:
            known = isinstance(error, (ServerExited, PortsTaken, AttachFailed, TimeoutError, ChildError, OSError))
            if not known:
                logger.exception("variant %s failed", self.name)
            self.health_left = None
            self.reason = str(error) if known else f"internal error: {error!r}"
            self._fail_unfinished(keys, self.reason)
            stopped = await self._stop_server()
            if stopped is not None and stopped.status != "failed":  # it ran until we stopped it
                self.reason = f"{self.reason}; {self.outcome_text}"
            self._set(VariantState.FAILED)
        finally:
            if watchdog is not None:
                watchdog.cancel()
            await self._close_client()

    def _queue_rollouts(self, upcoming: Iterator[tuple[int, dict[str, Any], int]]) -> list[str]:
        """Queue the next `QUEUE_CHUNK` rollouts (fewer at the end of the task list)."""
        keys = []
        for task_index, task_data, rollout_index in itertools.islice(upcoming, QUEUE_CHUNK):
            rollout = self.store.add_rollout(self.name, task_index, task_data, rollout_index, run=self._starts)
            keys.append(rollout.key)
            if self.recorder is not None:
                self.recorder.rollout(rollout.key, self.name, task_index, task_data, rollout_index, run=self._starts)
        return keys

    async def _up(self) -> str:
        """Attach, or start the server, until it answers health; its address.

        A started server gets a port that was free when we looked; if another process
        binds it first, the server dies before it answers, and it is started again on
        another port (`PORT_ATTEMPTS` in all)."""
        if self.config.attach:
            address = self.address = self.config.attach
            self._event("attached", address=address, model=self.model, sampling=self.sampling)
            deadline = time.monotonic() + self.config.health_timeout
            await self._wait_for_listener(address, deadline)
            await self._wait_for_health(address, round(max(0.1, deadline - time.monotonic()), 1))
            return address
        taken: list[int] = []
        while True:
            port = free_port()
            address = await self._launch(port)
            try:
                await self._wait_for_health(address, self.config.health_timeout)
                return address
            except ServerExited:
                if not port_taken(port):
                    raise
            taken.append(port)
            await self._close_client()
            await self._stop_server()
            if len(taken) == PORT_ATTEMPTS:
                raise PortsTaken(taken)
            self.outcome_text = None  # the lost start's: the next one has not ended
            self._event("port-taken", port=port, detail="taken by another process before the server bound it: trying another")

    async def _wait_for_health(self, address: str, timeout: float) -> None:
        self._client = EnvClient(address, on_drop=lambda reason: self.store.dropped_frame(self.name, reason))
        await self._client.wait_for_server_startup(timeout, on_wait=self._health_countdown)

    async def _launch(self, port: int) -> str:
        self.address = f"tcp://{LOOPBACK}:{port}"
        run_dir = private_dir(self.session_dir / file_name(f"{self.name}-{self._starts}"))
        self.stdout_path = run_dir / "stdout.log"
        self.stderr_path = run_dir / "stderr.log"
        env = {**os.environ, **self.config.environment()}
        self._child = SupervisedChild(
            argv=self.config.server_argv(port),
            cwd=self.config.working_dir() or Path.cwd(),
            env=env,
            stdout_path=self.stdout_path,
            stderr_path=self.stderr_path,
            record_path=run_dir / "supervisor.json",
            deadline_seconds=self.config.deadline_seconds,
            supervisor_grace_seconds=self.config.grace_seconds,
            label=self.name,
        )
        supervisor_pid = await asyncio.to_thread(self._child.start)
        self.server_started_at = time.time()
        self._event(
            "started", pid=self._child.server_pid, supervisor_pid=supervisor_pid, address=self.address,
            model=self.model, sampling=self.sampling,
        )
        return self.address

    async def _wait_for_listener(self, address: str, deadline: float) -> None:
        """An attached address, probed before the health wait: something that is not a
        ZMQ server fails at once; nothing listening is said while we wait for it."""
        host, _, port = address.removeprefix("tcp://").rpartition(":")
        while True:
            found = await probe(host.strip("[]"), int(port), timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            if found.zmq:
                self.reason = None
                return
            if found.listening:
                raise AttachFailed(found.detail)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{found.detail} for the whole health timeout ({self.config.health_timeout:g}s)")
            self.reason = found.detail
            self._health_countdown(left)
            await asyncio.sleep(min(0.5, left))

    def _health_countdown(self, left: float) -> None:
        self.health_left = left
        self.store.touch_variant(self.name)
        if self._child is not None and (code := self._child.poll()) is not None:
            raise ServerExited(self._exit_reason(code, "before it answered health"))

    async def _dispatch(self, keys: list[str]) -> None:
        """Run the queued rollouts, `max_concurrent` at a time, in order.

        A fixed pool of workers takes the next queued key: with 100,000 tasks there are
        still only `max_concurrent` waiting coroutines, so starting, cancelling and
        quitting cost nothing per queued rollout (a task per rollout parked on a
        semaphore made cancelling them quadratic). The workers start `START_CHUNK` a
        turn of the loop. `_runs` holds the runs in flight.
        """
        loop = asyncio.get_running_loop()
        upcoming = iter(keys)

        def take() -> str | None:
            # a dead server gets nothing more (its rollouts are failed already)
            for key in upcoming:
                if self._gone is None and self.store.rollouts[key].status is Status.QUEUED:
                    return key
            return None

        async def worker() -> None:
            while (key := take()) is not None:
                run = loop.create_task(self._run_one(key), name=f"run {key}")
                self._runs[key] = run
                try:
                    await run
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise  # the variant is stopping, not just this run
                finally:
                    del self._runs[key]
            if self.state is VariantState.RUNNING:
                self._set(VariantState.DRAINING)

        workers: list[asyncio.Task[None]] = []
        try:
            for started in range(min(self.config.max_concurrent, len(keys))):
                if started and started % START_CHUNK == 0:
                    await asyncio.sleep(0)
                workers.append(loop.create_task(worker()))
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _run_one(self, key: str) -> None:
        client = self._client
        assert client is not None
        rollout = self.store.rollouts[key]
        request_id = new_request_id()
        self.store.started(key, request_id)
        if self.recorder is not None:
            self.recorder.request(key, request_id)

        def on_delta(delta: WireDelta) -> None:
            self.store.apply_delta(key, delta)

        def on_frame(frame: bytes) -> None:
            self.recorder.delta_frame(key, frame)

        try:
            reply = await client.stream(
                rollout.task_data,
                self.config.client_config(),
                self.config.model,
                self.config.sampling,
                on_delta,
                request_id=request_id,
                on_frame=on_frame if self.recorder is not None else None,
            )
            record = rollout.assembly.finish(reply.head, reply.traces)
            self.store.finished(key, record)
        except asyncio.CancelledError:
            self._end(key, "cancelled with the variant", cancelled=True)
            raise
        except Exception as error:
            if isinstance(error, RunFailed):
                reason = error.error
            elif isinstance(error, (ServerGone, AssemblyError, MalformedReply)):
                reason = str(error)
            else:
                logger.exception("run %s of %s failed", request_id, key)
                reason = f"internal error: {error!r}"
            # a run the user cancelled ends cancelled, however the ending reached us
            cancelled = getattr(error, "aborted", False) or rollout.status is Status.CANCELLING
            self._end(key, reason, cancelled=cancelled)
        else:
            self._record_reply(key, _reply_of(record))

    async def _cancel_run(self, key: str, request_id: str | None) -> None:
        """Ask the server to abort the run, and end the rollout here if no aborted
        reply follows in time: a cancel always ends its rollout, whatever the server
        answers (or fails to)."""
        client, task = self._client, self._runs.get(key)
        try:
            if client is None or request_id is None:
                raise RuntimeError("no server holds the run")
            found = await client.cancel(request_id, timeout=CANCEL_ANSWER_WAIT)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - any failure to cancel still ends it here
            reason = f"cancelled here; the server did not answer the cancel: {error}"
        else:
            if found and task is not None:
                await asyncio.wait({task}, timeout=CANCEL_REPLY_WAIT)  # its aborted reply ends it
                if task.done():
                    return
                reason = f"cancelled here; the server took the cancel but sent no reply within {CANCEL_REPLY_WAIT:g}s"
            else:  # its reply is on the way or lost
                reason = "cancelled here; the server no longer held the run"
        self._end(key, reason, cancelled=True)
        if task is not None:
            task.cancel()

    async def _watch_server(self, keys: list[str]) -> None:
        """Notice a server that went away while this start's rollouts depend on it: a
        supervised child's exit at once, any server (an attached one, a stopped
        child) after missed health checks in a row. Then every rollout it owns fails."""
        client, child = self._client, self._child
        assert client is not None
        misses = 0
        health: asyncio.Task[bool] | None = None
        next_check = time.monotonic() + HEALTH_INTERVAL
        try:
            while self._gone is None:
                await asyncio.sleep(CHILD_POLL)
                if child is not None and (code := child.poll()) is not None:
                    self._gone = self._exit_reason(code, "mid-run")
                elif health is None and time.monotonic() >= next_check:
                    asked = time.monotonic()
                    health = asyncio.get_running_loop().create_task(client.health(timeout=HEALTH_TIMEOUT))
                elif health is not None and health.done():
                    answered = not health.cancelled() and health.exception() is None and health.result()
                    # frames that arrived meanwhile answer too: the reply queues behind them
                    answered = answered or client.last_received > asked
                    misses = 0 if answered else misses + 1
                    health, next_check = None, time.monotonic() + HEALTH_INTERVAL
                    if misses >= HEALTH_MISSES:
                        self._gone = (
                            f"the server at {self.address} stopped answering: {misses} health checks "
                            f"in a row got no answer within {HEALTH_TIMEOUT:g}s"
                        )
        finally:
            if health is not None:
                health.cancel()
        self._server_gone(keys, self._gone)

    def _server_gone(self, keys: list[str], reason: str) -> None:
        """Fail every rollout the dead server owns: runs waiting on it through the
        client, queued ones here (nothing more is dispatched to it)."""
        assert self._client is not None
        self._client.abandon_all(reason)
        for key in keys:
            if self.store.rollouts[key].status is Status.QUEUED:
                self._end(key, reason)

    # -- cancelling and stopping --------------------------------------------------

    async def _cancel(self) -> None:
        main = self._main
        in_flight = [
            self.store.rollouts[key].request_id
            for key, task in self._runs.items()
            if not task.done() and self.store.rollouts[key].status is Status.RUNNING
        ]
        for key in self.store.variants[self.name]:
            rollout = self.store.rollouts[key]
            if rollout.status is Status.QUEUED:
                self._end(key, "cancelled with the variant", cancelled=True)
            elif rollout.status is Status.RUNNING:
                self._cancelling(key)
        if in_flight and self._client is not None:
            self._note("cancel-runs", f"cancelling {len(in_flight)} run(s) over the wire")
            self._client.cancel_soon(rid for rid in in_flight if rid)
            # let the aborted replies land, so each rollout ends on the server's word
            runs = [task for task in self._runs.values() if not task.done()]
            if runs:
                await asyncio.wait(runs, timeout=CANCEL_REPLY_WAIT)
        if main is not None and not main.done():
            main.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await main
        await self._stop_server()
        await self._close_client()
        self._set(VariantState.CANCELLED)

    async def _stop_server(self) -> ChildOutcome | None:
        """Stop a supervised server (SIGTERM, its whole configured grace, SIGKILL) and
        say how it ended; None for an attached server, which is not ours to stop."""
        child = self._child
        if child is None:
            return None
        await self._terminate(child, None)
        # hashing the capture files reads them whole: never on the event loop
        outcome = await asyncio.to_thread(child.outcome)
        self.outcome_text = _describe(outcome)
        self._event("exited", code=outcome.exit_code, status=str(outcome.status), outcome=self.outcome_text)
        return outcome

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    # -- bookkeeping ------------------------------------------------------------

    def _fail_unfinished(self, keys: list[str], reason: str) -> None:
        for key in keys:
            self._end(key, reason)

    def _exit_reason(self, code: int, when: str) -> str:
        tail = tail_lines(self.stderr_path, 5) if self.stderr_path is not None else []
        last = " | ".join(line.strip() for line in tail if line.strip() and not line.startswith("# tracewatch"))
        return f"the server exited with code {code} {when}" + (f": {last}" if last else "")

    def _end(self, key: str, reason: str, cancelled: bool = False) -> None:
        """A rollout that ended without an episode, in the store and the recording
        alike, once (later endings of the same run are no-ops)."""
        if self.store.rollouts[key].status.finished:
            return
        self.store.failed(key, reason, cancelled=cancelled)
        self._record_reply(key, {"success": False, "error": reason})

    def _record_reply(self, key: str, reply: dict[str, Any]) -> None:
        """The reply with the store's word on how the rollout ended, so a replay or an
        opened recording never has to guess it from the error text."""
        if self.recorder is not None:
            self.recorder.reply(key, reply, self.store.rollouts[key].ending)


def _reply_of(record: dict[str, Any]) -> dict[str, Any]:
    """The reply a recording keeps: the head and the per-trace counts that check it."""
    return {
        "success": True,
        "error": None,
        "head": {key: value for key, value in record.items() if key != "traces"},
        "traces": [
            {"id": t["id"], "nodes": len(t["nodes"]), "calls": len(t["calls"])}
            for t in record.get("traces", ())
        ],
    }


def _describe(outcome: ChildOutcome) -> str:
    """How the server ended, in words: stopped by us (after its rollouts, at a cancel or
    a failed start), killed (and by whom), or ended by itself."""
    code = f"exit code {outcome.exit_code}"
    if outcome.status == "killed":
        record = outcome.record or {}
        if any(sent.get("signal") == "SIGKILL" for sent in record.get("signals", [])):
            grace = float(record.get("grace_seconds") or 0.0)
            return f"server killed with SIGKILL: still running {grace:g}s after SIGTERM · {code}"
        if outcome.cancelled:
            return f"server killed with SIGKILL by tracewatch at once · {code}"
        return f"server killed by a SIGKILL from outside tracewatch · {code}"
    if outcome.status == "cancelled":
        return f"server stopped with SIGTERM · {code}"
    signal_name = f" ({outcome.signal})" if outcome.signal else ""
    if outcome.cancelled:
        return f"server stopped with SIGTERM, then failed · {code}{signal_name}"
    if outcome.reason == "deadline":
        return f"server stopped at its deadline · {code}{signal_name}"
    ended = "failed" if outcome.status == "failed" else "exited"
    return f"server {ended} by itself · {code}{signal_name}"
