"""What the screen (and the headless runner) read of a session and its variants.

Live servers (`LiveSession`; `Variant` and the taps, each a `LiveVariant`), a replayed
recording (`ReplaySession`), an opened run or recording (`OpenedRun`,
`OpenedRecording`, `RecordedVariant`) and the tests' stand-ins all fill these shapes; the app is typed against them, never against one
implementation, so a new source of rollouts (a tap) is checked by mypy rather than
found out at run time. This module imports nothing heavy: the tui reads it freely.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # types only: the screen imports this module before any session exists
    import numpy as np
    import numpy.typing as npt

    from tracewatch.core.run.series import RunSeries
    from tracewatch.core.session.rollout import Rollout
    from tracewatch.core.session.store import Changes, VariantStats


class VariantState(StrEnum):
    """A variant's lifecycle; `start` and `cancel` are safe in any state."""

    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    DONE = "done"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def active(self) -> bool:
        return self in (VariantState.STARTING, VariantState.RUNNING, VariantState.DRAINING)

    @property
    def settled(self) -> bool:
        """It ended (done, cancelled or failed): nothing more will change until a start."""
        return self in (VariantState.DONE, VariantState.CANCELLED, VariantState.FAILED)

    @property
    def can_start(self) -> bool:
        """A fresh start is possible: nothing runs and nothing is being stopped."""
        return not self.active and self is not VariantState.CANCELLING

    @property
    def can_cancel(self) -> bool:
        """Something runs, or is being stopped (a second cancel kills at once)."""
        return self.active or self is VariantState.CANCELLING


@dataclass
class Escalation:
    """One step of stopping a server, as the card shows it."""

    t: float
    kind: str
    """"cancel-runs", "sigterm", "sigkill" or "exited"."""
    detail: str


class VariantView(Protocol):
    """One variant as a card, the logs tab and the summary read it, and the two
    commands the user may give it (which a read-only variant ignores)."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> VariantState: ...
    @property
    def reason(self) -> str | None:
        """Why it failed, if it did."""
    @property
    def pid(self) -> int | None:
        """The server's own pid (not its supervisor's) while it runs."""
    @property
    def supervised(self) -> bool:
        """Whether the server is ours to stop (a command we start), not one attached to."""
    @property
    def address(self) -> str | None: ...
    @property
    def model(self) -> str | None:
        """The model its runs ask for (None: not known, as in an older recording)."""
    @property
    def sampling(self) -> Mapping[str, Any]:
        """The sampling settings sent with every run."""
    @property
    def server_started_at(self) -> float | None: ...
    @property
    def health_left(self) -> float | None:
        """Seconds left for the server to answer health while starting."""
    @property
    def escalation(self) -> Sequence[Escalation]: ...
    @property
    def outcome_text(self) -> str | None:
        """How the server exited, once it has."""
    @property
    def can_start(self) -> bool: ...
    @property
    def can_cancel(self) -> bool: ...
    @property
    def cancel_unavailable(self) -> str | None:
        """Why this variant is never cancelled from here (a proxy: the server is not ours)."""
    @property
    def rollout_cancel_unavailable(self) -> str | None:
        """Why its rollouts cannot be cancelled one by one, if so."""
    @property
    def cancel_words(self) -> str | None:
        """What cancelling it does, where a server's words would be wrong (an eval)."""
    @property
    def status_line(self) -> str | None:
        """A tap's live counters (frames forwarded, copies the view dropped), for its card."""
    @property
    def source_lost(self) -> str | None:
        """Why the source a tap watches is not answering now (a relay that went away), if it is not."""

    def grace_left(self, now: float | None = None) -> float | None: ...
    def log_tail(self, n: int = 200) -> list[str]: ...
    def log_size(self) -> int: ...
    def start(self) -> None: ...
    def cancel(self) -> None:
        """First call cancels; a second while cancelling kills at once."""


class LiveVariant(VariantView, Protocol):
    """A variant the engine drives (a server we dispatch to, a proxy, an eval, a relay
    viewer): what quitting, shutdown and the headless runner ask of every kind alike,
    so none of them needs to know which kind it holds."""

    @property
    def quit_warning(self) -> str | None:
        """What stopping it costs someone else (a proxy's drivers lose their route), if anything."""
    def cancel_rollout(self, key: str) -> bool: ...
    async def stop(self, on_progress: Callable[[str], None] = ...) -> None:
        """End what no cancel ends (a proxy forwarding, a relay viewed); at once for the rest."""
    async def wait(self) -> None:
        """Until it has settled (done, cancelled or failed)."""


@dataclass(frozen=True)
class ReplayPosition:
    """Where a replay is: records applied of all, recorded seconds played of all."""

    records: int
    total: int | None
    """None while the recording is still being counted (`seconds` is then from the
    first record applied)."""
    seconds: float
    duration: float | None
    paused: bool
    finished: bool


class ReplayControls(Protocol):
    """Pause, step and seek: only a replay has them."""

    @property
    def paused(self) -> bool: ...
    def toggle_pause(self) -> bool:
        """Pause or play; true when now paused."""
    def step(self) -> bool:
        """Apply the next record; false at the end."""
    def seek(self, rollout_key: str) -> None:
        """Play fast until that rollout has ended, then pause."""
    def position(self) -> ReplayPosition: ...
    @property
    def fast(self) -> bool:
        """Playing as fast as it can (speed 0, or seeking): faster than it can be read."""


FINISHED_COLUMNS = ("variant", "task", "group", "task_index", "number", "ok", "reward", "turns", "tokens", "elapsed", "step", "used", "errors")
"""What `FinishedRows.column` gives, a numpy array of one value a row each:
`variant`, `task` and `group` are codes into `labels` (-1: none; a row whose task is
not known reads `task <task_index>`), `number` is the row's index among its task's rollouts, `ok` is 1
where the episode ended well (done) and 0 where it failed, `reward` and `elapsed` are
NaN, `step`, `used` and `tokens` -1, where not known (`used` 0: the trainer said it did not;
`tokens` -1: the source reported no count, which is not 0 tokens)."""


class FinishedRows(Protocol):
    """Finished episodes kept as columns rather than rollouts (a followed prime-rl
    run's history: a million `Rollout`s would not fit): what the table shows, filters
    and sorts by, read-only. A row that has a rollout (it was seen live, or opened) is
    shown as that rollout instead (`has_rollout`). Arrays are views: do not keep one
    across a change of `version`."""

    @property
    def count(self) -> int: ...
    @property
    def version(self) -> int:
        """Moves whenever a row was added or one of its values changed."""
    def column(self, name: str) -> npt.NDArray[Any]: ...
    def labels(self, name: str) -> Sequence[str]:
        """The texts of a coded column (`variant`, `task`), by code."""
    def has_rollout(self) -> npt.NDArray[np.bool_]:
        """Per row, whether a `Rollout` of the store stands for it."""
    def changed_since(self, version: int) -> npt.NDArray[np.int64] | None:
        """The rows added or changed since `version` (None: too many to say)."""
    def key(self, row: int) -> str:
        """The key its rollout has, once it has one."""
    def row_of(self, key: str) -> int | None: ...
    def rollout_row(self, key: str) -> int | None:
        """The row a rollout of the store stands for, if it stands for one (a dict lookup)."""
    def trace_ids(self, row: int) -> tuple[str, ...]: ...
    def containing(self, word: str, rows: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.bool_]:
        """Per row (of `rows`, if given), whether `word` (lower case) is in its key or one of its trace ids."""
    def first_traces(self) -> npt.NDArray[np.float64]:
        """Per row, its first trace id's leading 13 hex digits as a number (-1: none), to sort by."""


class StoreView(Protocol):
    """The store as the screen and the headless runner read it (`RolloutStore` meets
    it): what there is and what changed, never a way to change it. Only a session's
    own sources (its variants, taps, recordings) write the store, so mypy refuses a
    write from the screen."""

    @property
    def rollouts(self) -> Mapping[str, Rollout]: ...
    @property
    def variants(self) -> Mapping[str, Sequence[str]]:
        """Each variant's rollout keys, in the order they were queued."""
    @property
    def series(self) -> RunSeries: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def version(self) -> int:
        """Moves whenever which rollouts there are or how they stand changed."""
    @property
    def steps_known(self) -> bool: ...
    @property
    def partial(self) -> str | None:
        """Why the store holds only part of its source yet, if so."""
    @property
    def dropped_frames(self) -> int: ...
    @property
    def last_drop(self) -> str | None: ...
    @property
    def finished_rows(self) -> FinishedRows | None:
        """The finished rows kept as columns, in a session that keeps some (None elsewhere)."""

    def take_changes(self) -> Changes:
        """What changed since the last look (the next look starts from here)."""
    def variant_rollouts(self, variant: str) -> Iterable[Rollout]: ...
    def latest_run(self, variant: str) -> int: ...
    def stats(self, variant: str, run: int | None = None) -> VariantStats: ...
    def running_count(self) -> int: ...
    def stall_threshold(self, variant: str) -> float: ...
    def is_stalled(self, rollout: Rollout, now: float) -> bool: ...
    def stalled(self, now: float | None = None) -> list[Rollout]: ...
    def live_counts(self, now: float | None = None) -> tuple[int, int]: ...


class MetricPoints(Protocol):
    """One metric's rows in the order they were written: numpy columns, step NaN for a
    row keyed by time, producer a code into `RunMetrics.metric_producers`."""

    @property
    def step(self) -> np.ndarray[Any, np.dtype[np.float64]]: ...
    @property
    def time(self) -> np.ndarray[Any, np.dtype[np.float64]]: ...
    @property
    def value(self) -> np.ndarray[Any, np.dtype[np.float64]]: ...
    @property
    def producer(self) -> np.ndarray[Any, np.dtype[np.int16]]: ...


class EvalLine(Protocol):
    """How far one planned eval step is: its env and step, the episodes it expects,
    those done, those in flight, and the env's finished evals whose step is not known yet."""

    @property
    def env(self) -> str: ...
    @property
    def step(self) -> int: ...
    @property
    def expected(self) -> int: ...
    @property
    def done(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def unknown_step(self) -> int: ...


class RunMetrics(Protocol):
    """A run's own metrics and its eval plan, as a training run writes them beside its
    rollouts (a followed prime-rl run); the Trends tab charts them."""

    @property
    def metrics_version(self) -> int:
        """Moves whenever metric rows arrived, the plan changed or how far it is moved."""
    @property
    def metric_keys(self) -> Sequence[str]: ...
    @property
    def metric_producers(self) -> Sequence[str | None]: ...
    @property
    def metrics_skipped(self) -> str | None:
        """What the reader skipped (lines that are not rows), in words, if anything."""
    def metric_stamp(self, key: str) -> tuple[int, int]:
        """Moves whenever the key's rows do (the file's generation, the key's rows read):
        a chart is made again only then."""
    def metric_points(self, key: str) -> MetricPoints | None: ...
    def eval_lines(self) -> Sequence[EvalLine]:
        """Each planned eval step, by env then step (none: no plan)."""


class SessionView(Protocol):
    """A source of rollouts as the app and the headless runner drive it."""

    @property
    def store(self) -> StoreView: ...
    @property
    def variants(self) -> Mapping[str, VariantView]: ...
    @property
    def readonly_reason(self) -> str | None:
        """Why start and cancel do nothing here (a replay or an offline run), if so."""
    @property
    def offline(self) -> bool:
        """A recording or run folder opened to be read: nothing in it runs now, and
        what it holds ended before it was opened (a replay re-enacts its run instead)."""
    @property
    def recording_path(self) -> Path | None: ...
    @property
    def recording_note(self) -> str | None:
        """Where this session is recorded, or why recording stopped."""
    @property
    def recording_stopped(self) -> str | None:
        """Why and where this session's recording stopped, if it did: an error, since
        what follows is lost."""
    @property
    def truncated(self) -> str | None:
        """Why a recording read ends early (cut short or damaged), if it does."""
    @property
    def replay(self) -> ReplayControls | None:
        """The replay's controls, or None when this session is not a replay."""
    @property
    def quit_warning(self) -> str | None:
        """What quitting costs someone else (a proxy's drivers lose their route), if anything."""
    @property
    def run_metrics(self) -> RunMetrics | None:
        """The run's own metrics, where the session has them (a followed prime-rl run)."""

    async def start(self) -> None: ...
    async def wait(self) -> None:
        """Until nothing more will arrive."""
    async def shutdown(self, on_progress: Callable[[str], None] = ...) -> None:
        """Cancel every run, stop every server, and wait for them."""
    def cancel_rollout(self, key: str) -> bool: ...
    def cap_stall(self, limit: float) -> None:
        """No variant waits longer than `limit` to call a rollout stalled (`--cancel-stalled`)."""
    def user_busy(self) -> None:
        """The user is at the keys: background work that can wait, waits a moment."""
    def select(self, key: str | None) -> None:
        """The user looks at this rollout now (None: at nothing): its traces are loaded."""
    def show(self, keys: Iterable[str]) -> None:
        """A second screen (side by side) shows these rollouts now, loaded and kept
        loaded until it shows others (none: it closed)."""
    def export_episode(self, key: str, directory: Path | None = None) -> Path: ...
    def export_text(self, name: str, text: str, directory: Path | None = None) -> Path:
        """Write a file the user asked for where exports go; the path it is at."""
