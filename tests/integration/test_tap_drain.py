"""The shared time-bounded read of a tap's queue, on real ZMQ sockets: a stop reads
what is queued until its end and counts the rest, and every message is one or the
other."""

from __future__ import annotations

import math

import msgpack
import zmq
import zmq.asyncio

from tracewatch.core.taps.drain import SocketQueue
from tracewatch.core.taps.relay_viewer import run_messages
from tracewatch_guest.framing import BATCH, DELTA, LOSS, NO_RUN, encode

SENT = 200_000
"""More than any machine reads in one turn (100 ns a message)."""


async def test_a_stop_reads_until_its_end_then_counts_the_rest_and_loses_none() -> None:
    context = zmq.Context()
    pull = zmq.asyncio.Context.shadow(context.underlying).socket(zmq.PULL)
    push = context.socket(zmq.PUSH)
    for sock, option in ((pull, zmq.RCVHWM), (push, zmq.SNDHWM)):
        sock.setsockopt(option, 0)  # no limit: every message sent is queued (inproc: at once)
    pull.bind("inproc://drain")
    push.connect("inproc://drain")
    try:
        for i in range(SENT):
            push.send_multipart([b"m", str(i).encode()])
        read: list[int] = []
        ends = lambda: math.inf if not read else 0.0  # noqa: E731 (the stop's end passes after the first turn that reads)
        left = await SocketQueue(pull).read_at_stop(lambda frames: read.append(int(frames[1])), ends, quiet=0)
        assert read == list(range(len(read)))  # in order, none skipped
        assert len(read) + left == SENT
        assert read and left, "the turn before the end read some, and the end left the rest"
        push.send_multipart([b"m", b"late"])
        late: list[list[bytes]] = []
        after_stop = await SocketQueue(pull).read_at_stop(late.append, lambda: 0.0, quiet=0)
        assert (after_stop, late) == (1, [])  # past its end, a stop only counts
    finally:
        push.close(linger=0)
        pull.close(linger=0)
        context.term()


async def test_a_relay_viewers_stop_counts_the_runs_messages_it_left_not_the_relays_own() -> None:
    """A relay viewer's stop that leaves messages queued says how many of the runs'
    messages it left: a batch counts as the messages it holds (one socket message of
    hundreds of deltas is hundreds), a heartbeat and the relay's own words as none (a
    slow viewer's queue fills with heartbeats, which lose nothing)."""
    context = zmq.Context()
    pull = zmq.asyncio.Context.shadow(context.underlying).socket(zmq.PULL)
    push = context.socket(zmq.PUSH)
    pull.bind("inproc://relay-stop")
    push.connect("inproc://relay-stop")
    batches = (1, 5, 300, 70_000)  # msgpack's three array headers: fixarray, array 16, array 32
    try:
        for size in batches:
            push.send_multipart(encode(BATCH, NO_RUN, msgpack.packb([[DELTA, b"7", b"{}"]] * size), 0))
            push.send_multipart(encode(BATCH, NO_RUN, msgpack.packb([]), 0))  # a heartbeat
        push.send_multipart(encode(LOSS, NO_RUN, msgpack.packb({"lost": [b"7"], "running": []}), 0))
        left = await SocketQueue(pull).read_at_stop(lambda frames: None, lambda: 0.0, quiet=0, weigh=run_messages)
        assert left == sum(batches)
    finally:
        push.close(linger=0)
        pull.close(linger=0)
        context.term()
