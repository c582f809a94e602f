"""Retained data leaves the collector's walks after a slow full collection."""

from __future__ import annotations

import gc

from tracewatch.core.session.retention import (
    FreezeAfterSlowCollections,
    freeze_startup,
    pause_collection,
    resume_collection,
)


def test_what_survives_a_slow_full_collection_is_frozen() -> None:
    policy = FreezeAfterSlowCollections(slow=0.0).install()
    try:
        retained = [{"node": [index]} for index in range(10_000)]
        gc.collect()
        assert policy.freezes >= 1
        assert gc.get_freeze_count() >= 2 * len(retained)  # each dict and its list
        policy.uninstall()
        frozen = gc.get_freeze_count()
        gc.collect()
        assert gc.get_freeze_count() == frozen  # uninstalled: nothing more is frozen
    finally:
        policy.uninstall()
        gc.unfreeze()


def test_young_collections_never_freeze() -> None:
    policy = FreezeAfterSlowCollections(slow=0.0).install()
    try:
        gc.collect(1)
        assert policy.freezes == 0
    finally:
        policy.uninstall()
        gc.unfreeze()


def test_installing_freezes_startup_state_and_leaving_gives_it_back() -> None:
    startup = [{"module": [index]} for index in range(10_000)]
    with FreezeAfterSlowCollections() as policy:
        assert policy in gc.callbacks
        assert gc.get_freeze_count() >= 2 * len(startup)
    assert policy not in gc.callbacks
    assert gc.get_freeze_count() == 0  # a later session in the same process is collected as usual


def test_a_screen_freezes_its_startup_only_under_the_policy() -> None:
    before = gc.get_freeze_count()
    freeze_startup()
    assert gc.get_freeze_count() == before  # no policy installed: a test process keeps collecting its apps
    with FreezeAfterSlowCollections():
        widgets = [{"widget": [index]} for index in range(10_000)]
        frozen = gc.get_freeze_count()
        freeze_startup()
        assert gc.get_freeze_count() >= frozen + 2 * len(widgets)


def test_a_collector_paused_for_startup_is_back_with_the_first_screen_and_startup_frozen() -> None:
    try:
        pause_collection()
        with FreezeAfterSlowCollections():
            startup = [{"widget": [index]} for index in range(10_000)]
            assert not gc.isenabled()  # installing the policy leaves it off until the first screen
            freeze_startup()
            assert gc.isenabled()
            assert gc.get_freeze_count() >= 2 * len(startup)
        pause_collection()
        with FreezeAfterSlowCollections():
            pass  # a start that never drew its screen (it failed)
        assert gc.isenabled()
    finally:
        gc.enable()


def test_a_program_without_a_policy_resumes_the_collector_with_startup_frozen() -> None:
    try:
        pause_collection()
        startup = [{"module": [index]} for index in range(10_000)]
        resume_collection()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= 2 * len(startup)
        frozen = gc.get_freeze_count()
        resume_collection()  # already on: nothing more is frozen
        assert gc.get_freeze_count() == frozen
    finally:
        gc.enable()
        gc.unfreeze()


def test_a_full_collection_walks_what_arrived_since_the_last_freeze_a_few_young_collections_long() -> None:
    """Thousands of runs starting at once keep what each start makes: left to CPython's
    own pace, a full collection comes every hundred young ones and walks all they
    kept, however often what survives is frozen."""
    walked: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            walked.append(sum(len(gc.get_objects(generation)) for generation in range(3)))

    with FreezeAfterSlowCollections(slow=0.0):
        gc.callbacks.append(count)
        try:
            retained = [{"run": [index]} for index in range(150_000)]
        finally:
            gc.callbacks.remove(count)
    assert len(retained) == 150_000 and len(walked) >= 2
    young, _, _ = gc.get_threshold()
    assert max(walked) <= 40 * young, walked  # CPython's own pace: 130 * young
