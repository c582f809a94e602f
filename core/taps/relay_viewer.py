"""A variant that views a driver's relay (`tracewatch tap ADDRESS`): the runs a program
relays with `tracewatch_relay.Relay`, shown as they stand when we connect, then live.

The relay only publishes: the runs are the driver's, so neither the variant nor a
rollout can be cancelled from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import time
from collections.abc import Callable
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from tracewatch.core.errors import TracewatchError
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.taps.drain import STOP_SECONDS, SocketQueue, left_unread, read_until
from tracewatch.core.taps.tap_variant import TapVariant
from tracewatch_guest.framing import BATCH, BYE, HELLO, WELCOME, decode

WELCOME_TIMEOUT = 5.0
HELLO_SECONDS = 1.0
"""How often a viewer not (or no longer) welcomed says hello again."""
SILENT_BEATS = 3
"""Heartbeats missed before a viewer says the relay went away."""
NOT_OURS = "a relay only publishes: the runs belong to the program that drives them"


class RelayError(TracewatchError, OSError):
    """Nothing serves a relay at the address."""


def check_relay_address(address: str, timeout: float = 2.0) -> None:
    """Refuse an address where nothing listens at all (the driver is not running, or
    runs without a relay there)."""
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except (OSError, ValueError) as error:
        raise RelayError(f"nothing serves a relay at {address} ({error}): start the driver with its Relay there first") from None


def unbatch(payload: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """The messages in a relay's batch; ValueError if it is not one."""
    try:
        items = msgpack.unpackb(payload, use_list=False, raw=True)
    except Exception as error:
        raise ValueError(f"a relay batch could not be read: {error!r}") from None
    if not isinstance(items, tuple) or not all(isinstance(i, tuple) and len(i) == 3 and all(isinstance(p, bytes) for p in i) for i in items):
        raise ValueError("a relay batch is not a list of [kind, run, payload]")
    return list(items)


def _bye(dealer: zmq.asyncio.Socket) -> None:
    """Tell the relay to send us no more (again is harmless)."""
    with contextlib.suppress(zmq.ZMQError):
        dealer.send_multipart([BYE], zmq.NOBLOCK)


class RelayViewer(TapVariant):
    cancel_unavailable = NOT_OURS
    rollout_cancel_unavailable = NOT_OURS
    cancel_words = None
    pid = None
    health_left = None
    outcome_text = None
    supervised = False
    can_cancel = False

    def __init__(self, name: str, address: str, store: RolloutStore, recorder: Any = None) -> None:
        super().__init__(name, store, recorder)
        self.address = address
        self.dropped = 0
        self.unread = 0
        """Relay messages still queued when the stop's bounded read ended (counted, not read)."""
        self._stop_by = 0.0
        self.relay_gone = False
        """The relay went silent (its heartbeats stopped): gone or stopped, for now."""
        self._relay_id: str | None = None
        self._heartbeat = 1.0
        self._relay_dropped = 0
        """The current relay's last count of what it dropped for us."""

    @property
    def can_start(self) -> bool:
        return not self.state.active

    @property
    def source_lost(self) -> str | None:
        if not self.relay_gone or self.state is not VariantState.RUNNING:
            return None
        return f"the relay at {self.address} went away (no heartbeat): waiting for it to come back"

    @property
    def status_line(self) -> str | None:
        if self.state is not VariantState.RUNNING:
            return None
        if self.source_lost:
            return self.source_lost
        text = f"viewing the relay at {self.address}"
        return text + (f" · the relay dropped {self.dropped:,} messages for us" if self.dropped else "")

    def grace_left(self, now: float | None = None) -> float | None:
        return None

    def start(self) -> None:
        if self.can_start:
            self.reason = None
            self.unread = 0
            self.relay_gone = False
            self._relay_id = None
            self._set(VariantState.STARTING)
            self._main = asyncio.get_running_loop().create_task(self._view(), name=f"relay {self.name}")

    def cancel(self) -> None:
        """Not offered: see `cancel_unavailable`."""

    def cancel_rollout(self, key: str) -> bool:
        return False

    async def stop(self, on_progress: Callable[[str], None] = lambda _: None) -> None:
        """Stop viewing: what is queued is read for `STOP_SECONDS` at most, the rest counted."""
        if self._main is not None and not self._main.done():
            self._stop_by = time.monotonic() + STOP_SECONDS
            self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._main
        self.runs.unobserve_all("the viewer stopped before the run ended (the run itself goes on)")
        if self.relay_gone:
            self.reason = f"the relay at {self.address} went away (no heartbeat) and had not come back"
        if self.unread:
            self.reason = f"the viewer {left_unread(self.unread, 'relay messages')} (the runs themselves go on)"
        if self.state.active:
            self._set(VariantState.DONE)

    async def _view(self) -> None:
        context = zmq.asyncio.Context()
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.address)
        try:
            queue = SocketQueue(dealer)
            if not await self._greeted(dealer, queue):
                return
            self.server_started_at = time.time()
            self._set(VariantState.RUNNING)
            try:
                await self._read(dealer, queue)
            except asyncio.CancelledError:  # the stop: the relay sends no more; what it sent is read for a while
                _bye(dealer)
                self.unread = await queue.read_at_stop(self._handle, lambda: self._stop_by, quiet=0)
                raise
        finally:
            _bye(dealer)
            dealer.close(linger=100)
            context.term()

    async def _greeted(self, dealer: zmq.asyncio.Socket, queue: SocketQueue) -> bool:
        """Say hello (again each `HELLO_SECONDS`: a relay welcomes a few viewers a
        second) until the relay's welcome, handled like any message; False, with the
        reason, if none came."""
        ends = time.monotonic() + WELCOME_TIMEOUT
        while self._relay_id is None:
            left = ends - time.monotonic()
            if left <= 0:
                self.reason = f"no relay answered at {self.address} within {WELCOME_TIMEOUT:g}s (is it a tracewatch_relay.Relay?)"
                self._set(VariantState.FAILED)
                return False
            await dealer.send_multipart([HELLO])
            if await queue.wait(min(HELLO_SECONDS, left)):
                frames = queue.take()[0]
                if frames[:1] != [WELCOME]:
                    self.reason = f"{self.address} answered {frames[:1]!r}, not a tracewatch relay's welcome"
                    self._set(VariantState.FAILED)
                    return False
                self._handle(frames)
        return True

    async def _read(self, dealer: zmq.asyncio.Socket, queue: SocketQueue) -> None:
        """Every message as it comes; a relay silent for `SILENT_BEATS` heartbeats is
        said to be gone, and greeted each `HELLO_SECONDS` until one answers (the same
        relay, or a new one at the address)."""
        while True:
            silent_after = self._heartbeat * SILENT_BEATS if not self.relay_gone else HELLO_SECONDS
            if await queue.wait(silent_after):
                await read_until(lambda: math.inf, queue.take, self._handle)
                continue
            if not self.relay_gone:
                self.relay_gone = True
                self._say(f"the relay at {self.address} went silent: it is gone or stopped; waiting for it to come back")
                self.store.touch_variant(self.name)
            await dealer.send_multipart([HELLO])

    def _handle(self, frames: list[bytes]) -> None:
        message = decode(frames)
        if message is None:
            return
        if self.relay_gone:
            self.relay_gone = False
            self._say(f"the relay at {self.address} answers again")
            self.store.touch_variant(self.name)
        if message.kind == WELCOME:
            self._welcomed(message.payload)
        if message.dropped is not None and message.dropped > self._relay_dropped:
            self.dropped += message.dropped - self._relay_dropped
            self._relay_dropped = message.dropped
            self._say(f"the relay dropped messages for us ({self.dropped:,} so far); runs in flight lose their view")
            for lost in list(self.runs.keys):
                self.runs.lose(lost, "the relay dropped messages for this viewer")
            self.store.touch_variant(self.name)
        if message.kind != BATCH:
            return
        try:
            items = unbatch(message.payload)
        except ValueError as error:
            self._say(str(error))
            return
        for kind, run, payload in items:
            try:
                self.runs.message(kind, run, payload)
            except Exception as error:  # one odd message must not stop the view of the rest
                self.runs.lose(run, f"a relay message could not be read: {error!r}")

    def _welcomed(self, payload: bytes) -> None:
        """A relay's welcome: a new relay at the address (or ours, having forgotten us)
        sends the runs in flight from the start, so the runs we had end here."""
        try:
            welcome = msgpack.unpackb(payload)
        except Exception:
            welcome = None
        if not isinstance(welcome, dict):
            welcome = {}
        relay_id = str(welcome.get("relay", ""))
        if self._relay_id is not None:
            self.runs.end_all("the relay went away before the run ended (the run itself may go on)")
            if relay_id != self._relay_id:
                self.runs.numbers_restart()
        self._relay_id = relay_id
        heartbeat = welcome.get("heartbeat")
        self._heartbeat = float(heartbeat) if isinstance(heartbeat, int | float) and 0 < heartbeat < 60 else 1.0
        self._relay_dropped = 0
        too_big = welcome.get("too_big")
        skipped = f"; {too_big:,} runs in flight too large to be sent to a late viewer" if isinstance(too_big, int) and too_big > 0 else ""
        self._say(f"connected to the relay at {self.address}{skipped}")
