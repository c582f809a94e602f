"""Runs someone else drives, fed into the same store and recording as our own.

Every tap (the wire proxy, the injected eval tap, a relay viewer) hears of a run as
three kinds of news: it began (with its task, and the model and sampling it asked
for), a delta, and the reply. `ObservedRuns` turns that news into rollouts exactly as
a dispatched run would be: the store's `apply_delta` (its assembly, its display state), and
records a replay reads back. A run whose view breaks (a bad delta) fails *in the
view* with the reason; the driver's run is not ours to touch. A run whose copies the
view lost (a tap that drops rather than slow the driver) is not a failure of anyone's:
it ends as its reply says, with what the view saw, marked *view incomplete* with the
count, so the server is never blamed for the view's own loss.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Any, cast

from tracewatch.core.recordings.ending import VIEW_INCOMPLETE
from tracewatch.core.session.status import Ending, Status, episode_ending
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.task_identity import task_identity
from tracewatch.core.text import short_repr
from tracewatch.core.wire.assembly import AssemblyError, streamed_counts
from tracewatch.core.wire.protocol import RunResponse, WireDelta, is_aborted, unpack, unpack_delta
from tracewatch_guest.framing import BEGIN, DELTA, REPLY, SLOT


def run_note(model: Any, sampling: Any) -> str:
    """What a foreign run asked for, in one line: the model and the sampling set."""
    parts = [f"model {model}"] if model else []
    if isinstance(sampling, dict):
        parts += [f"{key} {value}" for key, value in sampling.items() if value is not None]
    return " · ".join(parts)


def _count(value: Any) -> int | None:
    """A number a tap sent, if it is one a table can show."""
    return value if type(value) is int and 0 <= value < 2**31 else None


def _when(value: Any) -> float | None:
    """A start time a tap sent, if it is a plausible wall-clock time that has passed."""
    if type(value) not in (int, float) or not 0 < value <= time.time() + 60:
        return None
    return float(value)


class ObservedRuns:
    def __init__(self, variant: str, store: RolloutStore, recorder: Any = None) -> None:
        self.variant = variant
        self.store = store
        self.recorder = recorder
        self.keys: dict[Hashable, str] = {}
        """Run id (whatever identifies a run to its tap) -> rollout key."""
        self._task_index: dict[str, int] = {}
        self._rollouts_of: dict[int, int] = {}
        self._numbered_before: dict[int, int] | None = None
        """Per task, the runs numbered before the tap's source restarted its own
        numbering (`numbers_restart`); None while the source's numbers are the first."""
        self.replied = 0
        """Runs that ended with their reply seen."""
        self.incomplete = 0
        """Of those, runs the view lost copies of."""
        self.queued: dict[Hashable, str] = {}
        """Runs waiting for one of their driver's slots -> the request id they run under."""
        self.lossy: dict[Hashable, int] = {}
        """Runs in flight that lost copies -> deltas of theirs that could not be applied since."""

    def key_of(self, run: Hashable) -> str | None:
        return self.keys.get(run)

    def begin(
        self,
        run: Hashable,
        task_data: Any,
        request_id: str,
        *,
        model: Any = None,
        sampling: Any = None,
        task_index: int | None = None,
        rollout_index: int | None = None,
        task_key: Any = None,
        started_at: float | None = None,
        running_since: float | None = None,
        queued: bool = False,
    ) -> str:
        """A new run: a rollout in the store, numbered by its task (its verifiers key,
        else its data: `task_identity`) unless the tap knows the numbers, and started
        now unless the tap knows when (a relay's viewer that joined late knows when the
        run was sent and when its first delta went out), or, `queued`, when its driver
        gives it a slot (`slot`)."""
        task = task_data if isinstance(task_data, dict) else {"task_data": short_repr(task_data)}
        task_key = task_key if isinstance(task_key, str) and task_key else None
        identity = task_identity(task_key, task)
        if task_index is None or self._numbered_before is not None:  # a restarted source's task numbers are its own
            task_index = self._task_index.get(identity, max(self._task_index.values(), default=-1) + 1)
        self._task_index.setdefault(identity, task_index)
        if rollout_index is None:
            rollout_index = self._rollouts_of.get(task_index, 0)
        elif self._numbered_before is not None:
            rollout_index += self._numbered_before.get(task_index, 0)
        self._rollouts_of[task_index] = max(self._rollouts_of.get(task_index, 0), rollout_index + 1)
        rollout = self.store.add_rollout(self.variant, task_index, task, rollout_index, task_key=task_key, t=started_at)
        rollout.note = run_note(model, sampling) or None
        self.keys[run] = rollout.key
        if self.recorder is not None:
            self.recorder.rollout(rollout.key, self.variant, task_index, task, rollout_index, t=started_at, task_key=task_key)
            if rollout.note:
                self.recorder.event(self.variant, "run", id=rollout.key, model=model, sampling=sampling)
        if queued:
            self.queued[run] = request_id
        else:
            self._start(rollout.key, request_id, started_at, running_since)
        return rollout.key

    def numbers_restart(self) -> None:
        """The source numbers its runs from the start again (a new driver session's
        relay): the runs it numbers from here follow those already shown, as a proxy's
        do, so a second session's first run is not a second `#1`."""
        self._numbered_before = dict(self._rollouts_of)

    def slot(self, run: Hashable) -> None:
        """A queued run got its driver's slot: it runs from now (a retry's second
        slot is the same run going on)."""
        key, request_id = self.keys.get(run), self.queued.pop(run, None)
        if key is not None and request_id is not None:
            self._start(key, request_id, None, None)

    def _start(self, key: str, request_id: str, started_at: float | None, running_since: float | None) -> None:
        self.store.started(key, request_id, t=started_at)
        if running_since is not None:
            self.store.running_from(key, running_since)
        if self.recorder is not None:
            self.recorder.request(key, request_id, t=started_at, running_t=running_since)

    def message(self, kind: bytes, run: bytes, payload: bytes) -> bool:
        """A tap's news of a run (`tracewatch_guest.framing`: begin, delta, reply) fed
        in; False for a kind that is not news of a run (the tap's own to read)."""
        if kind == DELTA:
            self.delta(run, unpack_delta(payload))
        elif kind == BEGIN:
            begin = unpack(payload)
            self.begin(
                run, begin.get("task_data"), f"{self.variant}-{run.decode()}",
                model=begin.get("model"), sampling=begin.get("sampling"), task_key=begin.get("task_key"),
                task_index=_count(begin.get("task_index")), rollout_index=_count(begin.get("rollout_index")), started_at=_when(begin.get("started_at")),
                running_since=_when(begin.get("running_since")), queued=begin.get("queued") is True,
            )
        elif kind == SLOT:
            self.slot(run)
        elif kind == REPLY:
            self.reply(run, unpack(payload))
        else:
            return False
        return True

    def lost_copies(self, run: Hashable) -> None:
        """Copies of this run may have been lost: it ends as its reply says, marked."""
        if run in self.keys:
            self.lossy.setdefault(run, 0)

    def delta(self, run: Hashable, delta: Any) -> None:
        key = self.keys.get(run)
        if key is None or self.store.rollouts[key].status.finished:
            return
        self.slot(run)  # a run's delta is news that it has its slot, whatever became of that message
        if run in self.lossy:
            self._delta_after_loss(run, key, delta)
            return
        if self.recorder is not None:
            self.recorder.delta(key, delta)
        try:
            if not isinstance(delta, dict):
                raise AssemblyError(f"a delta is a {type(delta).__name__}, not a map")
            self.store.apply_delta(key, cast(WireDelta, delta))
        except Exception as error:
            self.lose(run, f"a delta could not be applied: {error}")

    def _delta_after_loss(self, run: Hashable, key: str, delta: Any) -> None:
        """Applied if it can be (a trace whose start was lost cannot), and recorded
        only then, so a replay reads the same."""
        try:
            if not isinstance(delta, dict):
                raise AssemblyError(f"a delta is a {type(delta).__name__}, not a map")
            self.store.apply_delta(key, cast(WireDelta, delta))
        except Exception:
            self.lossy[run] += 1
            return
        if self.recorder is not None:
            self.recorder.delta(key, delta)

    def reply(self, run: Hashable, reply: Any) -> None:
        key = self.keys.pop(run, None)
        skipped = self.lossy.pop(run, None)
        self.queued.pop(run, None)
        if key is None:
            return
        rollout = self.store.rollouts[key]
        if rollout.status.finished:
            return
        self.replied += 1
        try:
            response = RunResponse.model_validate(reply)
            if skipped is not None and response.success and response.head is not None:
                self._incomplete(key, response.head, response.traces, skipped)
            elif not response.success:
                error = response.error or "the run failed"
                self.store.failed(key, error, cancelled=is_aborted(error))
            elif response.head is None:
                raise AssemblyError("the run's reply has no episode head")
            else:
                self.store.finished(key, rollout.assembly.finish(response.head, response.traces))
        except Exception as error:
            self.store.failed(key, f"the reply could not be read here: {error}")
        self._record_reply(key, reply if isinstance(reply, dict) else {"success": False, "error": short_repr(reply)})

    def _incomplete(self, key: str, head: dict[str, Any], summaries: Any, skipped: int) -> None:
        """A run that replied after the view lost copies of it: it ended as the server
        says, with what the view saw and how much that is."""
        self.incomplete += 1
        record = self.store.rollouts[key].assembly.finish(head, summaries, partial=True)
        nodes, calls = streamed_counts(summaries)
        seen_nodes = sum(len(trace["nodes"]) for trace in record["traces"])
        seen_calls = sum(len(trace["calls"]) for trace in record["traces"])
        failed = head.get("ok") is False or episode_ending(record).status is Status.FAILED
        status = Status.FAILED if failed else Status.DONE
        unapplied = f", {skipped} delta(s) after the loss could not be applied" if skipped else ""
        reason = (
            f"{VIEW_INCOMPLETE}: saw {seen_nodes} of {nodes} nodes and {seen_calls} of {calls} model calls{unapplied}; "
            f"the run itself ended {status.value} (the driver got every frame)"
        )
        self.store.ended(key, Ending(status, reason), record)

    def _record_reply(self, key: str, reply: dict[str, Any]) -> None:
        """The reply with the store's word on how the rollout ended (see
        tracewatch.core.recordings.ending), as a variant of our own records it."""
        if self.recorder is not None:
            self.recorder.reply(key, reply, self.store.rollouts[key].ending)

    def wholeness(self) -> str | None:
        """How many of the runs that replied the view saw whole, once one was not."""
        if not self.incomplete:
            return None
        return f"{self.replied - self.incomplete:,} of {self.replied:,} runs seen whole ({self.incomplete:,} view incomplete)"

    def lose(self, run: Hashable, reason: str) -> None:
        """The view of this run broke; the run itself goes on without us."""
        key = self.keys.get(run)
        if key is None or self.store.rollouts[key].status.finished:
            return
        reason = f"view lost: {reason} (the run itself is unaffected)"
        self.store.failed(key, reason)
        self._record_reply(key, {"success": False, "error": reason})

    def missed_end(self, run: Hashable, reason: str) -> None:
        """The view lost this run's end (its reply, dropped for the viewer): it ended
        at its driver, we cannot say how; not a failure of anyone's."""
        key = self.keys.pop(run, None)
        self.lossy.pop(run, None)
        self.queued.pop(run, None)
        if key is None or self.store.rollouts[key].status.finished:
            return
        reason = f"{VIEW_INCOMPLETE}: {reason}"
        self.store.unobserved(key, reason)
        self._record_reply(key, {"success": False, "error": reason})

    def unobserve_all(self, reason: str) -> None:
        """Every run still open is left unobserved here (the viewer stopped; they go on)."""
        for run in list(self.keys):
            self.unobserve(run, reason)

    def unobserve(self, run: Hashable, reason: str) -> None:
        """This run, if still open, is left unobserved: how it ends is not ours to see."""
        key = self.keys.pop(run, None)
        self.lossy.pop(run, None)
        self.queued.pop(run, None)
        if key is not None and not self.store.rollouts[key].status.finished:
            self.store.unobserved(key, reason)
            self._record_reply(key, {"success": False, "error": reason})

    def end_all(self, reason: str, cancelled: bool = False) -> None:
        """Every run still open ends here (the tap closed before their replies)."""
        for run in list(self.keys):
            key = self.keys.pop(run)
            self.queued.pop(run, None)
            if not self.store.rollouts[key].status.finished:
                self.store.failed(key, reason, cancelled=cancelled)
                self._record_reply(key, {"success": False, "error": reason})
