"""The demo's DeltaStreamer cuts deltas as verifiers 0.4.0's does: one flush per loop
iteration, cursors that only advance once a delta is sent, `discard`, and `pending`
left out when nodes land."""

from __future__ import annotations

import asyncio

from tracewatch.core.demo.streamer import DeltaStreamer
from tracewatch.core.demo.trace import LiveTrace, node
from tracewatch.core.wire.protocol import unpack

TASK = {"type": "DemoTask", "data": {"id": "t"}, "key": "k", "hash": "k"}


def make_trace() -> LiveTrace:
    return LiveTrace(TASK, {"config": {}, "runtime": None, "name": "agent", "trainable": True})


class Wire:
    def __init__(self) -> None:
        self.deltas: list[dict] = []
        self.fail_next = 0

    async def send(self, data: bytes) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise OSError("socket gone")
        self.deltas.append(unpack(data))


async def test_first_delta_opens_and_later_ones_carry_only_changes() -> None:
    wire, trace = Wire(), make_trace()
    streamer = DeltaStreamer(lambda: [trace], wire.send)
    streamer.watch(trace)
    await streamer.drain()
    assert wire.deltas[0]["open"]["id"] == trace.id
    assert set(wire.deltas[0]["set"]) >= {"agent", "timing", "rewards", "num_total_tokens"}
    trace.scalars["timing"]["boot"]["start"] = 1.0
    trace.scalars["ok"] = False  # unchanged value: compared by packed bytes, not sent
    trace.notify()
    await streamer.drain()
    assert wire.deltas[1] == {"trace": trace.id, "set": {"timing": trace.scalars["timing"]}}


async def test_changes_in_one_loop_iteration_ride_one_flush() -> None:
    wire, trace = Wire(), make_trace()
    streamer = DeltaStreamer(lambda: [trace], wire.send)
    streamer.watch(trace)
    await streamer.drain()
    trace.preview([{"role": "user", "content": "hi"}])
    trace.scalars["info"] = {"note": 1}
    trace.notify()
    await streamer.drain()
    assert len(wire.deltas) == 2
    assert wire.deltas[1]["pending"] == [{"role": "user", "content": "hi"}]
    assert wire.deltas[1]["set"] == {"info": {"note": 1}}


async def test_pending_is_left_out_when_nodes_land_and_sent_empty_when_abandoned() -> None:
    wire, trace = Wire(), make_trace()
    streamer = DeltaStreamer(lambda: [trace], wire.send)
    streamer.watch(trace)
    trace.preview([{"role": "user", "content": "q"}])
    await streamer.drain()
    user = node(None, {"role": "user", "content": "q"})
    reply = node(0, {"role": "assistant", "content": "a"}, sampled=True)
    trace.commit([user], reply, {"node": None, "usage": None, "time": {"start": 0.0, "end": 0.0}})
    await streamer.drain()
    assert "pending" not in wire.deltas[-1] and len(wire.deltas[-1]["nodes"]) == 2
    assert wire.deltas[-1]["calls"][0]["node"] == 1
    trace.preview([{"role": "tool", "content": "out"}])
    await streamer.drain()
    trace.abandon({"node": None, "usage": None, "time": {"start": 0.0, "end": 0.0}})
    await streamer.drain()
    assert wire.deltas[-1]["pending"] == [] and wire.deltas[-1]["calls"][0]["node"] is None


async def test_a_failed_send_leaves_the_cursor_so_the_next_flush_resends() -> None:
    wire, trace = Wire(), make_trace()
    streamer = DeltaStreamer(lambda: [trace], wire.send)
    wire.fail_next = 1
    streamer.watch(trace)
    await streamer.drain()
    assert wire.deltas == []
    trace.scalars["ok"] = True
    trace.notify()
    await streamer.drain()
    assert wire.deltas[0]["open"]["id"] == trace.id and wire.deltas[0]["set"]["ok"] is True


async def test_a_trace_leaving_the_live_set_is_discarded() -> None:
    wire = Wire()
    first, second = make_trace(), make_trace()
    live = [first]
    streamer = DeltaStreamer(lambda: live, wire.send)
    streamer.watch(first)
    await streamer.drain()
    live.remove(first)
    live.append(second)
    streamer.watch(second)
    await streamer.drain()
    assert wire.deltas[1] == {"trace": first.id, "discard": True}
    assert wire.deltas[2]["open"]["id"] == second.id


async def test_a_rollout_that_ends_abnormally_flushes_nothing_more() -> None:
    """An aborted run's client has gone: changes not yet flushed stay unsent."""
    wire, trace = Wire(), make_trace()

    async def rollout() -> None:
        async with DeltaStreamer(lambda: [trace], wire.send) as streamer:
            streamer.watch(trace)
            await streamer.drain()
            trace.scalars["ok"] = True
            trace.notify()
            raise asyncio.CancelledError

    await asyncio.gather(rollout(), return_exceptions=True)
    await asyncio.sleep(0)
    assert len(wire.deltas) == 1
