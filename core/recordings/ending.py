"""How a rollout ended, as a recording keeps it: the `end` of its reply record,
written once from the store's `Ending` and read back by `recorded_ending` alone, so
replay, open (the index and a rollout loaded on demand) and export agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracewatch.core.session.status import Ending, Status, episode_ending
from tracewatch.core.wire.protocol import is_aborted

LEGACY_CANCELLED = ("cancelled before it started", "cancelled with the variant")
"""With the server's abort and "cancelled here; ...", the reasons a recording made
before `end` existed gave a cancelled rollout: the app's own words. Any other error,
whatever it says, is a failure."""


VIEW_INCOMPLETE = "view incomplete"
"""How a watched run's ending begins when the watcher lost copies of it: it ended as
its reply says, but its record holds only what the watcher saw."""


def end_field(ending: Ending) -> dict[str, Any]:
    return {"status": ending.status.value, "reason": ending.reason}


def recorded_ending(record: Mapping[str, Any], episode: dict[str, Any] | None = None) -> Ending:
    """How the rollout of this reply record ended. A record without `end` (an older
    recording) is judged as that version's app judged it live: by `episode` when
    the caller assembled it, else by the head's `ok`."""
    end = record.get("end")
    if isinstance(end, Mapping) and end.get("status") in (Status.DONE, Status.FAILED, Status.CANCELLED, Status.UNOBSERVED):
        reason = end.get("reason")
        return Ending(Status(end["status"]), None if reason is None else str(reason))
    reply = record.get("r")
    reply = reply if isinstance(reply, Mapping) else {}
    head = reply.get("head")
    if reply.get("success") and isinstance(head, Mapping):
        if episode is not None:
            return episode_ending(episode)
        return Ending(Status.DONE) if head.get("ok") else Ending(Status.FAILED, "the episode did not succeed")
    error = str(reply.get("error") or "no reply")
    cancelled = is_aborted(error) or error in LEGACY_CANCELLED or error.startswith("cancelled here; ")
    return Ending(Status.CANCELLED if cancelled else Status.FAILED, error)
