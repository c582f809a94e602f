"""A driver with a relay in it, as its own process, for tests that watch what the relay
costs it and what its viewers are told: commands on stdin, one JSON line each on
stdout (after the relay's address, the first line).

    python -m tests.support.relay_driver MAX_BYTES DELTAS DELTA_BYTES

- `live`: a small run begins and sends a delta (it stays running until `finish`);
- `go`: one run of DELTAS large deltas, relayed by hand while the driver samples its
  own resident memory, then ended; the measures and what the relay counted;
- `finish`: the live run sends another delta and ends;
- `close`: the relay closes; what it left unsent, and the driver exits.
"""

from __future__ import annotations

import json
import os
import sys
import time

from tracewatch_relay import Relay

PAGE = os.sysconf("SC_PAGE_SIZE")
LIVE_ERROR = "the driver ended the live run"


def resident() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def main() -> None:
    max_bytes, deltas, delta_bytes = map(int, sys.argv[1:4])
    relay = Relay("tcp://127.0.0.1:0", max_bytes=max_bytes)
    print(relay.address, flush=True)
    live = None
    for command in sys.stdin:
        command = command.strip()
        if command == "live":
            live = relay.begin({"id": "live", "prompt": "p"}, model="m")
            live({"trace": "t", "open": {"id": "t"}})
            print(json.dumps({"live": live.run.decode()}), flush=True)
        elif command == "go":
            print(json.dumps(big_run(relay, deltas, delta_bytes)), flush=True)
        elif command == "finish" and live is not None:
            live({"trace": "t", "set": {"after": "the big run"}})
            live.end(error=LIVE_ERROR)
            print(json.dumps({"finished": live.run.decode()}), flush=True)
        elif command == "close":
            started = time.monotonic()
            unsent = relay.close()
            print(json.dumps({"close_seconds": time.monotonic() - started, "unsent": unsent}), flush=True)
            return


def big_run(relay: Relay, deltas: int, delta_bytes: int) -> dict[str, int]:
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
    return {"before": before, "peak": peak, "dropped_for_viewers": dropped_for_viewers, "dropped": relay.dropped}


if __name__ == "__main__":
    main()
