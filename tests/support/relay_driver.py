"""A driver with a relay in it, as its own process, for tests that watch what the relay
costs it: it relays one run of large deltas by hand while sampling its own resident
memory, then says what it measured (one JSON line) and what the relay counted, and
closes the relay when told.

    python -m tests.support.relay_driver MAX_BYTES DELTAS DELTA_BYTES

Lines on stdout: the relay's address; after a line on stdin, the measures (JSON);
after another, the relay's close (JSON).
"""

from __future__ import annotations

import json
import os
import sys
import time

from tracewatch_relay import Relay

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def main() -> None:
    max_bytes, deltas, delta_bytes = map(int, sys.argv[1:4])
    relay = Relay("tcp://127.0.0.1:0", max_bytes=max_bytes)
    print(relay.address, flush=True)
    sys.stdin.readline()
    before = peak = resident()
    on_delta = relay.begin({"id": "big", "prompt": "p"}, model="m")
    on_delta({"trace": "t", "open": {"id": "t"}})
    for i in range(deltas):
        on_delta({"trace": "t", "set": {"i": i, "text": "x" * delta_bytes}})
        time.sleep(0.0005)  # a driver that does work between deltas, so the relay thread keeps up with it
        if i % 20 == 0:
            peak = max(peak, resident())
    on_delta.end(error="the driver stopped it")
    while relay._queue:
        time.sleep(0.01)
    peak = max(peak, resident())
    dropped_for_viewers = sum(viewer.dropped for viewer in list(relay._viewers.values()))
    print(json.dumps({"before": before, "peak": peak, "dropped_for_viewers": dropped_for_viewers, "dropped": relay.dropped}), flush=True)
    sys.stdin.readline()
    started = time.monotonic()
    unsent = relay.close()
    print(json.dumps({"close_seconds": time.monotonic() - started, "unsent": unsent}), flush=True)


if __name__ == "__main__":
    main()
