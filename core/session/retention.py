"""Keeping retained rollout data out of the garbage collector's walks.

A session keeps every rollout it saw until it ends, so most of the heap is data that
never becomes garbage; yet each full collection walks all of it, a pause that grows
with the session (docs/performance.md). After a full collection that took long, every
object left is alive by definition: `gc.freeze()` moves them into the permanent
generation, so later full collections walk only what arrived since. The cost: an
object frozen here that later becomes part of a garbage cycle is never collected
(freed memory through reference counting is unaffected, and episode data holds no
cycles); that is why the freeze waits for a slow collection instead of running often.
What exists when the policy is installed (imported modules, the config, the session)
is frozen at once, as CPython's documentation suggests after startup: otherwise the
first full collection walks all of it, the longest pause of a whole run.
"""

from __future__ import annotations

import gc
import time
from typing import Any

SLOW_COLLECTION = 0.010
"""A full collection longer than this freezes what survived it."""

FULL_EVERY = 2
"""Middle-generation collections between two full ones (CPython's own: 10). A full
collection walks everything kept since the last freeze: at CPython's pace that is what
a hundred young collections kept (thousands of runs starting at once keep their tasks,
coroutines and assemblies, all walked with the loop held); at this one, a fifth of
it, frozen in its turn once a walk is slow."""


class FreezeAfterSlowCollections:
    """A `gc.callbacks` entry: installed by the programs that hold sessions (the app,
    headless runs, benchmarks), never by the library code they call."""

    def __init__(self, slow: float = SLOW_COLLECTION) -> None:
        self.slow = slow
        self.freezes = 0
        self._started = 0.0
        self._thresholds = gc.get_threshold()

    def install(self) -> FreezeAfterSlowCollections:
        """Freeze what exists now (startup state), then after each slow collection;
        full collections come `FULL_EVERY` middle ones apart."""
        if self not in gc.callbacks:
            gc.freeze()
            gc.callbacks.append(self)
            self._thresholds = gc.get_threshold()
            gc.set_threshold(self._thresholds[0], self._thresholds[1], FULL_EVERY)
        return self

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
            gc.set_threshold(*self._thresholds)

    def __enter__(self) -> FreezeAfterSlowCollections:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        """Uninstalled, and what it froze back in the collector's walks: a program
        that runs sessions one after another in one process (tests) collects each.
        The collector is on after, even if a paused start never got to resume it."""
        self.uninstall()
        gc.unfreeze()
        gc.enable()

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif info.get("generation") == 2 and time.perf_counter() - self._started >= self.slow:
            gc.freeze()
            self.freezes += 1


def pause_collection() -> None:
    """Called first by the `tracewatch` command (`tracewatch.launch`): the modules, the config,
    the engine, the queued rollouts and the app's widgets it makes before its first
    screen live as long as the program, and collections walking them as they were made
    are a noticeable share of its launch (a full collection among them). The app turns
    the collector back on once that screen is drawn (`freeze_startup`); a headless run
    or a command without a session as it begins (`resume_collection`)."""
    gc.disable()


def resume_collection() -> None:
    """The collector back on after `pause_collection`, for a command that installs no
    policy (export, compare): what exists is frozen first, or the first young collection
    would walk all of it."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def freeze_startup() -> None:
    """Freeze what exists now, if the program installed the policy: a screen calls it
    once it is first drawn, so its widgets, styles and compiled CSS are never walked
    (otherwise the first full collection after the app's start walks them all, the
    longest pause of a run). A program that did not install it (a test
    running many apps in one process) keeps every collection as it was. The collector
    is on after it (`pause_collection`)."""
    if any(isinstance(callback, FreezeAfterSlowCollections) for callback in gc.callbacks):
        gc.freeze()
    resume_collection()
