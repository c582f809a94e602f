"""A variant that is a wire proxy: drivers point at our listen address, their frames
go on to the env server unchanged, and every run that passes through is shown.

Forwarding runs in a process of its own (`tracewatch.core.taps.forward_process`) and never
waits for us; here, on the app's loop, copies of the frames are read a slice of time
at a time and fed to the same assembly, store and recording as a run we dispatch. The
server is not ours, so the variant offers no cancel; a rollout's cancel is a real
`cancel` sent upstream, and the driver gets verifiers' own aborted reply.

A forwarding process that dies (killed, crashed) is noticed within a turn of the
loop and replaced on the same address, where the drivers reconnect by themselves; the
runs that were in flight through it are failed here and answered as failed to their
drivers, whose client would otherwise wait for their replies forever.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import time
from collections.abc import Callable
from typing import Any

from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.taps.drain import STOP_SECONDS, TURN_SECONDS, count_left, left_unread, read_for, read_until
from tracewatch.core.taps.forward_process import COPY_BYTES, ForwardingProcess
from tracewatch.core.taps.forwarder import DRIVER_LEFT, TO_SERVER, Copy, ForwarderError, counters_line
from tracewatch.core.taps.tap_variant import TapVariant
from tracewatch.core.taps.view_priority import SPAWNER, yield_view
from tracewatch.core.wire.protocol import KIND_DELTA, KIND_REPLY, RunRequest, unpack, unpack_delta

TURN_COPIES = 2000
"""Copies counted (not read) at a time when a stop leaves some unread."""
IDLE_WAIT = 0.02
CARD_EVERY = 0.25
"""The card's counters are redrawn at most this often."""

STOPPED_UNSEEN = (
    "the proxy stopped before the view saw the run's reply (the driver got every frame forwarded; "
    "a run still in flight lost its route)"
)
"""A stop is a viewer's stop: the view cannot know how these runs ended, so they are
unobserved, never failed (their replies may be among the copies left unread)."""
REPLY_DROPPED = "the proxy dropped the run's reply for the view, past the replies it keeps (the driver got it)"
DRIVER_LEFT_FIRST = (
    "lost: its driver closed the connection before the run's reply; the env server may still be running it "
    "(verifiers' server runs on for a client that left without a cancel, and its deltas and reply go nowhere)"
)
"""The proxy closes the upstream connection of a driver that went (as a direct
connection would end), so no more of the run can come: it ends here, unobserved."""
SERVER_LEFT_FIRST = "lost: the env server closed the connection before the run's reply (the proxy closed the driver's too)"
ROUTE_LOST = "drivers pointed at {listen} lose their route to {upstream} until a proxy listens there again"


class ProxyVariant(TapVariant):
    cancel_unavailable = "the env server behind a proxy is not ours to stop; cancel runs one by one, or quit to stop the proxy"
    rollout_cancel_unavailable = None
    cancel_words = None
    pid = None
    health_left = None
    outcome_text = None
    supervised = False
    copy_bytes = COPY_BYTES
    """Bytes of copies the view may fall behind by before copies are dropped."""
    view_niceness = 0
    """How far below its forwarding process the view runs once forwarding (0: as the
    app; headless, where nothing but printed lines waits on the view, it yields)."""

    def __init__(self, name: str, listen: str, upstream: str, store: RolloutStore, recorder: Any = None) -> None:
        super().__init__(name, store, recorder)
        self.listen = listen
        self.upstream = upstream
        self.forwarder: ForwardingProcess | None = None
        self.frames = collections.Counter[str]()
        """Requests seen by method (run, health, cancel)."""
        self._dropped_seen = 0
        self._upstream_seen: tuple[bool | None, str] | None = None
        self._forwarded_seen = 0
        self._touched = 0.0
        self.restarts = 0
        """Forwarding processes that died and were replaced."""

    @property
    def address(self) -> str:
        return f"{self.listen} → {self.upstream}"

    @property
    def can_start(self) -> bool:
        return not self.state.active

    @property
    def can_cancel(self) -> bool:
        return False

    @property
    def status_line(self) -> str | None:
        forwarder = self.forwarder
        if forwarder is None:
            return None
        upstream = "upstream ok" if forwarder.upstream_ok else f"upstream: {forwarder.upstream_note}"
        return " · ".join(filter(None, [upstream, counters_line(forwarder), self.runs.wholeness()]))

    @property
    def quit_warning(self) -> str | None:
        """What quitting costs the drivers, while the proxy forwards."""
        if not self.state.active:
            return None
        return ROUTE_LOST.format(listen=self.listen, upstream=self.upstream)

    def grace_left(self, now: float | None = None) -> float | None:
        return None

    def start(self) -> None:
        if not self.can_start:
            return
        self.reason = None
        self._set(VariantState.STARTING)
        self._main = asyncio.get_running_loop().create_task(self._run(), name=f"proxy {self.name}")

    def cancel(self) -> None:
        """Not offered: see `cancel_unavailable`."""

    def cancel_rollout(self, key: str) -> bool:
        rollout = self.store.rollouts.get(key)
        forwarder = self.forwarder
        if rollout is None or rollout.status.finished or forwarder is None or rollout.request_id is None:
            return False
        if key not in self.runs.keys.values():
            return False
        if rollout.status is Status.CANCELLING:  # asked once already
            return True
        forwarder.cancel(rollout.request_id)
        self._cancelling(key)
        self._say(f"cancel sent upstream for {key} (request {rollout.request_id})")
        return True

    async def stop(self, on_progress: Callable[[str], None] = lambda _: None) -> None:
        """Stop forwarding: the last copies are read, runs still open are left unobserved."""
        if self.state.active:
            on_progress(f"{self.name}: stopping the proxy; {self.quit_warning}")
        while self.state is VariantState.STARTING:  # a spawn in progress ends within its timeout
            await asyncio.sleep(0.05)
        forwarder = self.forwarder
        if forwarder is None or not self.state.active:
            return
        # read from the stop's start, so while the process stops too; the rest are counted
        # (the drivers got every frame; the runs still open end at the stop anyway)
        ends = time.monotonic() + STOP_SECONDS
        await asyncio.to_thread(forwarder.stop)
        if self._main is not None:
            self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._main
        await read_until(lambda: ends, lambda: forwarder.take(1), self._read_or_say)  # what was forwarded before it stopped
        unread = count_left(lambda: forwarder.take(TURN_COPIES))
        forwarder.close()
        self.runs.unobserve_all(STOPPED_UNSEEN)
        lost = []
        if forwarder.dropped:
            lost.append(f"dropped {forwarder.dropped:,} frame copies")
        if unread:
            lost.append(left_unread(unread, "frame copies"))
        if lost:
            view = f"the view {' and '.join(lost)} (the drivers got every frame)"
            self.reason = "; ".join(filter(None, [self.reason, view, self.runs.wholeness()]))
        self._say(f"stopped: {counters_line(forwarder)}")
        self._event("exited", detail=counters_line(forwarder))
        self._set(VariantState.DONE)

    # -- reading the copies --------------------------------------------------------

    async def _run(self) -> None:
        """Spawn the forwarding process off the loop (the screen keeps drawing), then
        read its copies until stopped."""
        forwarder = ForwardingProcess(self.listen, self.upstream, copy_bytes=self.copy_bytes)
        try:
            await asyncio.get_running_loop().run_in_executor(SPAWNER, forwarder.start)
        except (ForwarderError, OSError) as error:
            forwarder.close()
            self.reason = str(error)
            self._set(VariantState.FAILED)
            return
        self.forwarder = forwarder
        self.listen = forwarder.listen
        if self.view_niceness:
            yield_view(self.view_niceness)
        self.server_started_at = time.time()
        self._say(f"listening on {self.listen}, forwarding to {self.upstream}")
        self._event("started", address=self.address)
        self._set(VariantState.RUNNING)
        await self._watch(forwarder)

    async def _watch(self, forwarder: ForwardingProcess) -> None:
        while True:
            handled = read_for(TURN_SECONDS, functools.partial(forwarder.take, 1), self._read_or_say)  # one chunk's copies at a time
            self._check(forwarder)
            if (how := forwarder.died()) is not None:
                if (replacement := await self._replace(forwarder, how)) is None:
                    return
                forwarder = replacement
            await asyncio.sleep(0 if handled else IDLE_WAIT)

    async def _replace(self, dead: ForwardingProcess, how: str) -> ForwardingProcess | None:
        """A new forwarding process on the dead one's address; the runs in flight
        through the dead one fail, here and (through the new one) to their drivers."""
        read_for(STOP_SECONDS, lambda: dead.take(1), self._read_or_say)  # what it pushed before it died
        dead.close()
        in_flight = [run[1] for run in self.runs.keys if isinstance(run, tuple)]
        died = f"the forwarding process died ({how}) at {time.strftime('%H:%M:%S')}"
        self.runs.end_all(f"{died} while the run was in flight; its driver was sent this error")
        self._say(f"{died}; starting a new one on {self.listen}")
        replacement = ForwardingProcess(self.listen, self.upstream, copy_bytes=self.copy_bytes)
        try:
            await asyncio.get_running_loop().run_in_executor(SPAWNER, replacement.start)
        except (ForwarderError, OSError) as error:
            replacement.close()
            self.forwarder = None
            self.reason = f"{died} and no new one could listen on {self.listen}: {error}; {ROUTE_LOST.format(listen=self.listen, upstream=self.upstream)}"
            self._set(VariantState.FAILED)
            return None
        replacement.fail(in_flight)
        self.forwarder = replacement
        self._dropped_seen = 0
        self.restarts += 1
        self.reason = f"{died}; a new one listens on the same address ({len(in_flight)} run(s) in flight failed to their drivers)"
        self._say(self.reason)
        self._event("forwarder restarted", detail=self.reason)
        self.store.touch_variant(self.name)
        return replacement

    def _read_or_say(self, copy: Copy) -> None:
        try:
            self._read(copy)
        except Exception as error:  # one odd frame must not stop the view of the rest
            self._say(f"a frame could not be read: {error!r}")

    def _read(self, copy: Copy) -> None:
        if copy.direction != TO_SERVER:
            if copy.lost is not None:
                self._lost(copy.driver, copy.lost)
            for request_id in copy.ended:
                self.runs.missed_end((copy.driver, request_id), REPLY_DROPPED)
            if copy.closed is not None:
                self._connection_closed(copy.driver, copy.closed)
        if not copy.frames:
            return  # only news of what the view lost
        if len(copy.frames) != 3:
            self._say(f"a {len(copy.frames)}-frame message passed through (not the env-server protocol); forwarded as is")
            return
        raw_id, word, payload = copy.frames
        run = (copy.driver, raw_id)
        if copy.direction == TO_SERVER:
            method = word.decode(errors="replace")
            self.frames[method] += 1
            if word == RunRequest.method.encode():
                request = unpack(payload)
                if not isinstance(request, dict):
                    raise ValueError(f"a run request is a {type(request).__name__}, not a map")
                self.runs.begin(
                    run,
                    request.get("task_data"),
                    raw_id.decode(errors="replace"),
                    model=request.get("model"),
                    sampling=request.get("sampling"),
                )
            return
        if self.runs.key_of(run) is None:
            return  # health and cancel replies, or a run begun before we watched
        if word == KIND_DELTA:
            try:
                delta = unpack_delta(payload)
            except Exception as error:
                self.runs.lose(run, f"a delta could not be decoded ({error})")
                return
            self.runs.delta(run, delta)
        elif word == KIND_REPLY:
            try:
                reply = unpack(payload)
            except Exception as error:
                reply = {"success": False, "error": f"the reply could not be decoded here ({error})"}
            self.runs.reply(run, reply)

    def _connection_closed(self, driver: bytes, side: str) -> None:
        """A driver's connection closed after every copy of it was read: its runs the
        view saw no reply of end here, unobserved (only that connection's: another
        driver, or this one reconnected, is another connection)."""
        runs = [run for run in self.runs.keys if isinstance(run, tuple) and run[0] == driver]
        if not runs:
            return
        reason = DRIVER_LEFT_FIRST if side == DRIVER_LEFT else SERVER_LEFT_FIRST
        for run in runs:
            self.runs.unobserve(run, reason)
        who = "driver" if side == DRIVER_LEFT else "env server"
        self._say(f"driver {driver.decode(errors='replace')}'s connection closed by its {who} with {len(runs)} run(s) in flight: left unobserved")

    def _lost(self, driver: bytes, request_ids: tuple[bytes | None, ...]) -> None:
        """Copies of these runs were lost (of every run of the driver, where one
        lost copy's run is not known)."""
        if None in request_ids:
            runs = [run for run in self.runs.keys if isinstance(run, tuple) and run[0] == driver]
        else:
            runs = [(driver, request_id) for request_id in request_ids]
        for run in runs:
            self.runs.lost_copies(run)

    def _check(self, forwarder: ForwardingProcess) -> None:
        """Counters and upstream news: a card redraw when they change. (Which runs a
        drop touched is known where their connection's copies pick up again.)"""
        if forwarder.dropped != self._dropped_seen:
            lost = forwarder.dropped - self._dropped_seen
            self._dropped_seen = forwarder.dropped
            self._say(f"the view fell behind and dropped {lost:,} frame copies; the drivers got every frame")
        while forwarder.notes:
            self._say(forwarder.notes.pop(0))
        upstream = (forwarder.upstream_ok, forwarder.upstream_note)
        if upstream != self._upstream_seen:
            self._upstream_seen = upstream
            self._say(f"upstream {self.upstream}: {forwarder.upstream_note}")
            self.store.touch_variant(self.name)
        now = time.monotonic()
        if forwarder.forwarded != self._forwarded_seen and now - self._touched >= CARD_EVERY:
            self._forwarded_seen, self._touched = forwarder.forwarded, now
            self.store.touch_variant(self.name)
