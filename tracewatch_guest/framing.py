"""The tap framing: how guest code tells tracewatch of the runs it sees, in one place
for both sides (the relay and the injected eval tap send it, core's taps read it).

A message is four frames, `[kind, run, payload, dropped]`: `run` names a run within
its sender (`NO_RUN` for news of the sender itself), `payload` is msgpack, and
`dropped` counts, in decimal, the messages this reader has missed so far, so that it
can say its view is incomplete. The eval tap PUSHes messages to tracewatch; a relay
sends them to each viewer's DEALER, which opens with a one-frame `HELLO` (answered by
`WELCOME`) and leaves with a one-frame `BYE`; the relay sends its messages to a viewer
many at a time, as one `BATCH`.

Standard library only, and nothing heavier than `typing` at import: the eval tap
loads this module into every interpreter the eval starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

HELLO = b"hello"
"""A sender's first word: the eval tap's (payload: its pid and argv), or a viewer's to a relay (one frame)."""
WELCOME = b"welcome"
"""A relay's answer to a viewer's hello (payload: how many runs are in flight; they follow)."""
BEGIN = b"begin"
"""A run began (payload: `begin_payload`)."""
DELTA = b"delta"
"""One of verifiers' deltas of a run, as a served run streams it."""
SLOT = b"slot"
"""A run that began waiting for one of its driver's slots (vf-eval's `max_concurrent`;
its begin said `queued`) has one now: it runs from here."""
REPLY = b"reply"
"""How a run ended (payload: `served_reply` or `failed_reply`)."""
BATCH = b"batch"
"""Many messages as one, from a relay to a viewer (payload: a msgpack array of
`[kind, run, payload]` arrays; `unbatch` reads it). An empty one is a heartbeat."""
LOSS = b"loss"
"""A relay dropped messages for this viewer (payload: `lost`, the runs it dropped
messages of since its last loss, and `running`, the runs in flight at the relay): it
comes before anything else the viewer is sent after the drop, so a run it names as
lost, or a run the viewer holds open that is no longer running, is known incomplete
before any later message of it."""
CLOSED = b"closed"
"""A relay closed (payload: as `loss`'s, what this viewer lost that no loss told it
yet): published on the relay's notices socket, which no backlog of the viewer's data
can hold up, under the viewer's identity (`welcome`'s `you`)."""
BYE = b"bye"
"""A viewer leaving a relay (one frame)."""
RUN_DIR = b"run_dir"
"""Where vf-eval writes its run directory (payload: its absolute `path`)."""
TAPPED = b"tapped"
"""The eval tap wrapped verifiers' Env in a process (payload: its `pid`, and `how`:
"on import" or "already imported")."""
NO_RUN = b""
"""The run frame of a message about the sender rather than one of its runs."""

ADDRESS_VAR = "TRACEWATCH_TAP"
"""The environment variable that tells the eval tap where to send (a ZMQ address)."""

ABORTED_ERROR = "Cancelled: rollout aborted"
"""The reply error verifiers' server sends for a run a cancel aborted; a guest's run
that was cancelled ends with the same words, so every tap reads it as cancelled."""


class Message(NamedTuple):
    kind: bytes
    run: bytes
    payload: bytes
    dropped: int | None
    """None when the frame is not a count (the rest of the message is still news)."""


def encode(kind: bytes, run: bytes, payload: bytes, dropped: int) -> list[bytes]:
    return [kind, run, payload, str(dropped).encode()]


def decode(frames: list[bytes]) -> Message | None:
    """The message in these frames, or None if they are not one."""
    if len(frames) != 4:
        return None
    kind, run, payload, dropped = frames
    try:
        count: int | None = int(dropped)
    except ValueError:
        count = None
    return Message(kind, run, payload, count)


def begin_payload(task_data: Any, model: Any, sampling: Any, **more: Any) -> dict[str, Any]:
    """What a run asked for: its task, and the model and sampling it runs with."""
    return {"task_data": task_data, "model": model, "sampling": sampling, **more}


def served_reply(head: Any, traces: Iterable[tuple[Any, int, int]]) -> dict[str, Any]:
    """What a served run replies when it succeeds: the episode without its traces
    (`head`), and per trace its id and how many nodes and calls it has, for the
    reader to check what it assembled from the deltas."""
    return {
        "success": True,
        "error": None,
        "head": head,
        "traces": [{"id": trace_id, "nodes": nodes, "calls": calls} for trace_id, nodes, calls in traces],
    }


def failed_reply(error: BaseException | str | None) -> dict[str, Any]:
    """What a served run replies when it fails: a cancel in verifiers' own words,
    anything else as the exception (or text) that ended it."""
    if isinstance(error, str):
        text = error
    elif error is None:
        text = "the run ended without an episode"
    elif _cancelled(error):
        text = ABORTED_ERROR
    else:
        text = f"{type(error).__name__}: {error}"
    return {"success": False, "error": text}


def _cancelled(error: BaseException) -> bool:
    import asyncio  # here, not at import: most runs never fail

    return isinstance(error, asyncio.CancelledError | KeyboardInterrupt) or type(error).__name__ == "CancelledError"
