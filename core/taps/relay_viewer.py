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
from tracewatch.core.taps.drain import STOP_SECONDS, TURN_SECONDS, SocketQueue, left_unread, read_until
from tracewatch.core.taps.loss import apply_loss, read_loss
from tracewatch.core.taps.tap_variant import TapVariant
from tracewatch_guest.framing import BATCH, BYE, CLOSED, HELLO, LOSS, WELCOME, decode

WELCOME_TIMEOUT = 5.0
HELLO_SECONDS = 1.0
"""How often a viewer not (or no longer) welcomed says hello again."""
SILENT_BEATS = 3
"""Heartbeats missed before a viewer says the relay went away."""
LOOK_SECONDS = 0.5
"""The longest a viewer waits for the relay at a time: a wait that ends this much later
than asked means the viewer was not running meanwhile, and counts no silence."""
NOT_OURS = "a relay only publishes: the runs belong to the program that drives them"
CLOSED_QUIET = 0.5
"""Told the relay closed, the viewer first reads what it had sent until this long passes
without a message: the runs whose ends are among it end as they did."""


def view_loss(dropped: int) -> str | None:
    """What a viewer says of the messages a relay dropped for it (card, summary, runs)."""
    return f"the relay dropped {dropped:,} messages for this viewer" if dropped else None


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


def run_messages(frames: list[bytes]) -> int:
    """The runs' messages one relay message holds, read from its batch's msgpack array
    header without unpacking the rest: what a stop that leaves it unread says it left
    (a heartbeat, an empty batch, and the relay's own words hold none)."""
    message = decode(frames)
    if message is None or message.kind != BATCH or not message.payload:
        return 0
    payload = message.payload
    head = payload[0]
    if 0x90 <= head <= 0x9F:
        return head & 0x0F
    if head == 0xDC and len(payload) >= 3:
        return int.from_bytes(payload[1:3], "big")
    if head == 0xDD and len(payload) >= 5:
        return int.from_bytes(payload[1:5], "big")
    return 1  # not a batch we can read: one message, as the viewer would have said of it


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
        self.relay_closed = False
        """The relay said it closed (on its notices)."""
        self._relay_id: str | None = None
        self._heartbeat = 1.0
        self._relay_dropped = 0
        """The current relay's last count of what it dropped for us."""
        self._notices: zmq.asyncio.Socket | None = None
        self._notices_at: tuple[str, bytes] | None = None
        """Where the current relay tells of its close, and our identity there."""
        self._heard_at = 0.0
        """When the relay's last message came."""

    @property
    def can_start(self) -> bool:
        return not self.state.active

    @property
    def source_lost(self) -> str | None:
        if self.state is not VariantState.RUNNING:
            return None
        if self.relay_closed:
            lost = f"; {self.view_loss}" if self.view_loss else ""
            return f"the relay at {self.address} went away (it closed{lost}): waiting for it to come back"
        if not self.relay_gone:
            return None
        return f"the relay at {self.address} went away (no heartbeat): waiting for it to come back"

    @property
    def status_line(self) -> str | None:
        if self.state is not VariantState.RUNNING:
            return None
        if self.source_lost:
            return self.source_lost
        return " · ".join(filter(None, [f"viewing the relay at {self.address}", self.view_loss]))

    @property
    def view_loss(self) -> str | None:
        return view_loss(self.dropped)

    def grace_left(self, now: float | None = None) -> float | None:
        return None

    def start(self) -> None:
        if self.can_start:
            self.reason = None
            self.unread = 0
            self.relay_gone = self.relay_closed = False
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
            how = "it closed" if self.relay_closed else "no heartbeat"
            self.reason = f"the relay at {self.address} went away ({how}) and had not come back"
        if self.unread:
            self.reason = f"the viewer {left_unread(self.unread, 'relay messages')} (the runs themselves go on)"
        self.reason = "; ".join(filter(None, [self.reason, self.view_loss])) or None
        if self.state.active:
            self._set(VariantState.DONE)

    async def _view(self) -> None:
        context = zmq.asyncio.Context()
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.address)
        notices = context.socket(zmq.SUB)
        notices.setsockopt(zmq.LINGER, 0)
        closes: asyncio.Task[None] | None = None
        try:
            queue = SocketQueue(dealer)
            self._notices = notices
            if not await self._greeted(dealer, queue):
                return
            self.server_started_at = time.time()
            self._set(VariantState.RUNNING)
            closes = asyncio.get_running_loop().create_task(self._watch_closes(notices, queue), name=f"relay closes {self.name}")
            try:
                await self._read(dealer, queue)
            except asyncio.CancelledError:  # the stop: the relay sends no more; what it sent is read for a while
                _bye(dealer)
                self.unread = await queue.read_at_stop(self._handle, lambda: self._stop_by, quiet=0, weigh=run_messages)
                raise
        finally:
            if closes is not None:
                closes.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await closes
            self._notices = None
            self._notices_at = None
            _bye(dealer)
            dealer.close(linger=100)
            notices.close()
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
        said to be gone, its runs in flight end here as lost (its driver died or
        stopped: they would otherwise run, then stall, forever), and it is greeted each
        `HELLO_SECONDS` until one answers (the same relay, or a new one at the address)."""
        while True:
            silent_after = self._heartbeat * SILENT_BEATS if not self.relay_gone else HELLO_SECONDS
            if await self._heard(queue, silent_after):
                await read_until(lambda: math.inf, queue.take, self._handle)
                continue
            if not self.relay_gone:
                self._say(f"the relay at {self.address} went silent: it is gone or stopped; waiting for it to come back")
                self._relay_went_away(f"no heartbeat for {silent_after:g}s: its driver died or stopped")
            await dealer.send_multipart([HELLO])

    @staticmethod
    async def _heard(queue: SocketQueue, silent_after: float) -> bool:
        """Whether a message came before `silent_after` seconds passed that we were
        awake to hear it in. A wait that ends well past what it asked for means we were
        stopped or starved meanwhile (a SIGSTOP, a laptop lid, a loaded machine): the
        relay's heartbeats of that while may still be on their way in, so the silence
        is counted again from then. Counted across the stop, a viewer resumed after
        more than a silence heard its wait time out first and called a live relay gone."""
        awake_since = time.monotonic()
        while (left := awake_since + silent_after - time.monotonic()) > 0:
            asked = min(LOOK_SECONDS, left)
            polled = time.monotonic()
            if await queue.wait(asked):
                return True
            if time.monotonic() - polled > asked + LOOK_SECONDS:
                awake_since = time.monotonic()
        return False

    def _follow(self, endpoint: str | None, you: bytes | None) -> None:
        """Listen where the current relay tells of its close (a new relay, a new place)."""
        notices = self._notices
        if notices is None or self._notices_at == (endpoint, you):
            return
        if self._notices_at is not None:
            with contextlib.suppress(zmq.ZMQError):
                notices.disconnect(self._notices_at[0])
            notices.setsockopt(zmq.UNSUBSCRIBE, self._notices_at[1])
        self._notices_at = None
        if endpoint is not None and you is not None:
            notices.setsockopt(zmq.SUBSCRIBE, you)
            notices.connect(endpoint)
            self._notices_at = (endpoint, you)

    async def _watch_closes(self, notices: zmq.asyncio.Socket, queue: SocketQueue) -> None:
        """The relay's word that it closed: what it had sent us is read first, until
        `CLOSED_QUIET` passes without a message, so the runs whose ends we have end as
        they did; then those we lost end, incomplete."""
        while True:
            frames = await notices.recv_multipart()
            message = decode(frames[1:]) if self._notices_at is not None and frames[:1] == [self._notices_at[1]] else None
            if message is None or message.kind != CLOSED:
                continue
            told = time.monotonic()
            while True:
                await read_until(lambda: math.inf, queue.take, self._handle)
                if time.monotonic() - max(told, self._heard_at) >= CLOSED_QUIET:
                    break
                await asyncio.sleep(TURN_SECONDS)
            self._count_dropped(message.dropped)
            self._apply_loss(message.payload, closed="the relay closed")
            self.relay_closed = True
            self._say(f"the relay at {self.address} closed" + (f"; {self.view_loss}" if self.view_loss else ""))
            self._relay_went_away("it closed")

    def _relay_went_away(self, why: str) -> None:
        """The relay is gone: its runs still in flight end here as lost (how each ended
        is not known here), and it is greeted until one answers."""
        self.relay_gone = True
        self.runs.unobserve_all(f"lost: the relay went away before the run ended ({why}); how the run itself ended is not known here")
        self.store.touch_variant(self.name)

    def _apply_loss(self, payload: bytes, closed: str | None = None) -> None:
        if (loss := read_loss(payload)) is not None:
            apply_loss(self.runs, loss, view_loss(max(self.dropped, 1)) or "", "the driver's", closed)

    def _count_dropped(self, dropped: int | None) -> None:
        if dropped is not None and dropped > self._relay_dropped:
            self.dropped += dropped - self._relay_dropped
            self._relay_dropped = dropped
            self._say(f"the relay dropped messages for us ({self.dropped:,} so far)")
            self.store.touch_variant(self.name)

    def _handle(self, frames: list[bytes]) -> None:
        message = decode(frames)
        if message is None:
            return
        self._heard_at = time.monotonic()
        if self.relay_gone:
            self.relay_gone = self.relay_closed = False
            self._say(f"the relay at {self.address} answers again")
            self.store.touch_variant(self.name)
        if message.kind == WELCOME:
            self._welcomed(message.payload)
        self._count_dropped(message.dropped)
        if message.kind == LOSS:
            self._apply_loss(message.payload)
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
        you, port = welcome.get("you"), welcome.get("notices")
        host = self.address.removeprefix("tcp://").rpartition(":")[0]
        known = type(port) is int and 0 < port < 65536 and self.address.startswith("tcp://") and isinstance(you, bytes)
        self._follow(f"tcp://{host}:{port}" if known else None, you if known and isinstance(you, bytes) else None)
        too_big = welcome.get("too_big")
        skipped = f"; {too_big:,} runs in flight too large to be sent to a late viewer" if isinstance(too_big, int) and too_big > 0 else ""
        self._say(f"connected to the relay at {self.address}{skipped}")
