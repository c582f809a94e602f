"""Every source hands a delta to the store the same way, `RolloutStore.apply_delta`:
a run tracewatch dispatched (the client decodes, the store applies) as much as a
replayed recording, so what a view derives from a delta has one precondition (a
decoded delta, applied nowhere yet). Played by a scripted server on a real socket,
through the real engine, recorder and headless runner."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.support.scripted_server import ScriptedServer, endings, good_run, replay, run_live
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import RolloutStore


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many deltas each rollout was handed through `apply_delta`."""
    seen: Counter[str] = Counter()
    apply_delta = RolloutStore.apply_delta

    def counting(store: RolloutStore, key: str, delta: Any, t: float | None = None) -> None:
        seen[key] += 1
        apply_delta(store, key, delta, t)

    monkeypatch.setattr(RolloutStore, "apply_delta", counting)
    return seen


async def test_a_dispatched_run_and_its_replay_reach_the_store_through_apply_delta(tmp_path, applied):
    scripts = {"a": good_run("ta", turns=2), "b": good_run("tb", turns=3)}
    async with ScriptedServer(scripts) as server:
        engine, code, out = await run_live(tmp_path, server, list(scripts))
    live = engine.store.rollouts
    assert {r.status for r in live.values()} == {Status.DONE}, out
    streamed = {key: rollout.deltas for key, rollout in live.items()}
    assert streamed == {"remote/0": 4, "remote/1": 5}
    assert dict(applied) == streamed, "every delta of a dispatched run came in by apply_delta"
    applied.clear()
    replayed = await replay(tmp_path / "live.twrec")
    assert endings(replayed.store) == endings(engine.store)
    assert dict(applied) == streamed
