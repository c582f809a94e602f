"""Which variant runs a config: the one place each kind (a server we dispatch to, a
proxy, an eval, a relay viewer) is chosen, so a new tap kind is wired in here and
nowhere else in the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracewatch.core.session.config import AnyVariantConfig, VariantConfig
from tracewatch.core.session.contracts import LiveVariant
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.variant import Variant
from tracewatch.core.taps.eval_variant import EvalVariant
from tracewatch.core.taps.proxy_variant import ProxyVariant
from tracewatch.core.taps.relay_viewer import RelayViewer


def variant_for(config: AnyVariantConfig, store: RolloutStore, session_dir: Path, recorder: Any = None) -> LiveVariant:
    if isinstance(config, VariantConfig):
        return Variant(config, store, session_dir, recorder)
    if config.relay is not None:
        return RelayViewer(config.name, config.relay, store, recorder)
    if config.proxy is not None:
        return ProxyVariant(config.name, config.proxy.listen, config.proxy.upstream, store, recorder)
    assert config.eval is not None
    return EvalVariant(
        config.name,
        config.eval,
        store,
        session_dir,
        recorder,
        cwd=config.working_dir(),
        env=config.environment(),
        grace_seconds=config.grace_seconds,
        deadline_seconds=config.deadline_seconds,
        finish_without_viewer=config.on_viewer_exit == "finish",
    )
