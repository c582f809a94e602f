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


SLOW_FOLDERS = {"integration", "terminal", "app"}
"""Folders whose every test takes seconds: real processes and sockets (servers,
supervisors, the app in tmux) or the real Textual app under `run_test`. So `-m "not
slow"` is the unit tests and the rules about the codebase, less those marked slow one
by one (many hypothesis examples, a child process a case)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        if item.path.relative_to(tests).parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


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
