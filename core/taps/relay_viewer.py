"""A variant that views a driver's relay (`tracewatch tap ADDRESS`): the runs a program
relays with `tracewatch_relay.Relay`, shown as they stand when we connect, then live.

The relay only publishes: the runs are the driver's, so neither the variant nor a
rollout can be cancelled from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio

from core.errors import TracewatchError
from core.session.contracts import VariantState
from core.session.store import RolloutStore
from core.taps.drain import STOP_SECONDS, SocketQueue, left_unread
from core.taps.tap_variant import TapVariant
from tracewatch_guest.framing import BYE, HELLO, WELCOME, decode

WELCOME_TIMEOUT = 5.0
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


def _bye(dealer: zmq.asyncio.Socket) -> None:
    """Tell the relay to send us no more (again is harmless)."""
    with contextlib.suppress(zmq.ZMQError):
        dealer.send_multipart([BYE], zmq.NOBLOCK)


class RelayViewer(TapVariant):
    cancel_unavailable = NOT_OURS
    rollout_cancel_unavailable = NOT_OURS
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

    @property
    def can_start(self) -> bool:
        return not self.state.active

    @property
    def status_line(self) -> str | None:
        if self.state is not VariantState.RUNNING:
            return None
        text = f"viewing the relay at {self.address}"
        return text + (f" · the relay dropped {self.dropped:,} messages for us" if self.dropped else "")

    def grace_left(self, now: float | None = None) -> float | None:
        return None

    def start(self) -> None:
        if self.can_start:
            self.reason = None
            self.unread = 0
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
        self.runs.end_all("the viewer stopped before the run ended (the run itself goes on)")
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
            await dealer.send_multipart([HELLO])
            try:
                frames = await asyncio.wait_for(dealer.recv_multipart(), WELCOME_TIMEOUT)
            except TimeoutError:
                self.reason = f"no relay answered at {self.address} within {WELCOME_TIMEOUT:g}s (is it a tracewatch_relay.Relay?)"
                self._set(VariantState.FAILED)
                return
            if frames[:1] != [WELCOME]:
                self.reason = f"{self.address} answered {frames[:1]!r}, not a tracewatch relay's welcome"
                self._set(VariantState.FAILED)
                return
            self.server_started_at = time.time()
            self._say(f"connected to the relay at {self.address}")
            self._set(VariantState.RUNNING)
            queue = SocketQueue(dealer)
            try:
                await queue.read_forever(self._handle)
            except asyncio.CancelledError:  # the stop: the relay sends no more; what it sent is read for a while
                _bye(dealer)
                self.unread = await queue.read_at_stop(self._handle, lambda: self._stop_by, quiet=0)
                raise
        finally:
            _bye(dealer)
            dealer.close(linger=100)
            context.term()

    def _handle(self, frames: list[bytes]) -> None:
        message = decode(frames)
        if message is None:
            return
        if message.dropped is not None and message.dropped > self.dropped:
            self.dropped = message.dropped
            self._say(f"the relay dropped messages for us ({self.dropped:,} so far); runs in flight lose their view")
            for lost in list(self.runs.keys):
                self.runs.lose(lost, "the relay dropped messages for this viewer")
            self.store.touch_variant(self.name)
        try:
            self.runs.message(message.kind, message.run, message.payload)
        except Exception as error:  # one odd message must not stop the view of the rest
            self.runs.lose(message.run, f"a relay message could not be read: {error!r}")
