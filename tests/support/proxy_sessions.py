"""Proxy sessions on free ports, one copy for the proxy tests: a free port is a guess
that another process may take before the forwarder binds it, so a start that lost its
port is tried again on another, as the app's own servers are."""

from __future__ import annotations

from pathlib import Path

from tests.support.polling import eventually
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.ports import PORT_ATTEMPTS, free_address
from tracewatch.core.recordings.recorder import Recorder
from tracewatch.core.session.config import Config
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.taps.proxy_variant import ProxyVariant

WAIT = 60.0


class ProxySessions:
    """Starts proxy sessions to `upstream`; `shutdown` ends every one it started, the
    attempts that lost their port included (they share the caller's recorder, so they
    end with the rest)."""

    def __init__(self, upstream: str, session_dir: Path) -> None:
        self.upstream = upstream
        self.session_dir = session_dir
        self.started: list[LiveSession] = []

    async def start(self, recorder: Recorder | None = None, upstream: str | None = None) -> tuple[LiveSession, ProxyVariant]:
        """A running proxy session named `px`, forwarding to `upstream` (by default the
        one these sessions were made for)."""
        for _ in range(PORT_ATTEMPTS):
            engine = LiveSession(Config.for_proxy(free_address(), upstream or self.upstream, "px"), recorder=recorder, session_dir=self.session_dir)
            self.started.append(engine)
            await engine.start()
            variant = engine.variants["px"]
            assert isinstance(variant, ProxyVariant)
            await eventually(lambda v=variant: v.state is not VariantState.STARTING, WAIT, "the forwarding process up")
            if variant.state is not VariantState.FAILED or "in use" not in (variant.reason or ""):
                break
        assert variant.state is VariantState.RUNNING, variant.reason
        return engine, variant

    async def shutdown(self) -> None:
        for engine in self.started:
            await engine.shutdown()
