"""A tap's `loss` and `closed` (`tracewatch_guest.framing`): the runs a sender dropped
messages of for this viewer, and the runs still running at the sender, read into the
runs a viewer holds, the same for a relay and the eval tap."""

from __future__ import annotations

from typing import Any

import msgpack

from tracewatch.core.taps.observed import ObservedRuns


def read_loss(payload: bytes) -> dict[str, Any] | None:
    """The loss in a payload, or None if it is not one."""
    try:
        loss = msgpack.unpackb(payload)
    except Exception:
        return None
    return loss if isinstance(loss, dict) else None


def _runs_in(value: Any) -> set[bytes]:
    return {run for run in value if isinstance(run, bytes)} if isinstance(value, list | tuple) else set()


def apply_loss(runs: ObservedRuns, loss: dict[str, Any], said: str, whose: str, closed: str | None = None) -> None:
    """A run it names as lost goes on marked incomplete; a run we hold open that is no
    longer running at the sender had its end dropped for us, and ends here,
    incomplete. At the sender's close (`closed` says how it went) a run that lost
    messages ends too: nothing more of it comes. `said` is the viewer's word on what
    was dropped, `whose` whom the run itself belongs to. A loss that names whose runs
    it speaks for (`runs_from`, the id prefix of one process of a multi-process eval)
    touches only those: another process's runs are not among its running ones."""
    lost, running = _runs_in(loss.get("lost")), _runs_in(loss.get("running"))
    scope = loss.get("runs_from")
    ours = [run for run in runs.keys if not isinstance(scope, bytes) or isinstance(run, bytes) and run.startswith(scope)]
    for run in ours:
        if run not in running or (closed and (run in lost or run in runs.lossy)):
            ending = "the run's end among them" if run not in running else f"and {closed} before the run ended"
            runs.missed_end(run, f"{said}, {ending} (the run itself is {whose})")
        elif run in lost:
            runs.lost_copies(run)
