"""Fixtures every test module may use."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.demo_sessions import write_config
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.session.config import load_config

# hypothesis's default 200 ms deadline per example, and its too_slow check on how long
# generating examples takes, fail a test when a loaded machine stalls it, not when the
# code is slow: every @given here runs without either (a test's own suppress list
# replaces this one, so it names too_slow itself if it needs to)
settings.register_profile("tracewatch", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tracewatch")


@pytest.fixture
def engine_for(tmp_path: Path) -> Iterator[Callable[..., LiveSession]]:
    """Engines over demo variant configs (`demo_sessions.demo_variant`); no server
    they started outlives the test."""
    engines: list[LiveSession] = []

    def make(*variants: str) -> LiveSession:
        engine = LiveSession(load_config(write_config(tmp_path, list(variants))), session_dir=tmp_path / "session")
        engines.append(engine)
        return engine

    yield make
    # nothing may outlive a test, whatever it asserted
    for engine in engines:
        for variant in engine.variants.values():
            child = variant.child
            if child is not None and child.poll() is None:
                child.terminate(1.0)
