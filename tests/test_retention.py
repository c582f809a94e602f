"""Retained data leaves the collector's walks after a slow full collection."""

from __future__ import annotations

import gc

from core.session.retention import FreezeAfterSlowCollections


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
