"""Golden screenshots of the token view (pytest-textual-snapshot) in two colourings,
on the demo's training rollout played in-process: the sampler's logprobs, and the turn
where the trainer disagrees with the sampler. `pytest --snapshot-update` rewrites them
after a deliberate change; look at them before committing."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.polling import until
from tests.support.repo import REPO
from tests.support.training_session import KEY, training_deltas, training_engine
from tracewatch.core.demo import vocabulary
from tracewatch.core.tokens.tokenizer import Tokenizers
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.tokens.token_view import TokenScreen

NOW = 1_764_500_000.0


@pytest.fixture(scope="module")
def deltas() -> list[dict]:
    return asyncio.run(training_deltas())


def opened(*keys: str):
    async def run_before(pilot) -> None:
        app = pilot.app
        await until(pilot, lambda: app.table.row_count == 1)
        app.table.select(KEY)
        await until(pilot, lambda: app.trace_pane.transcript.trace_state is not None)
        await pilot.press("t")
        await until(pilot, lambda: isinstance(app.screen, TokenScreen) and app.screen.lines.placed is not None and app.screen.lines.tokens is not None)
        await pilot.press(*keys)
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("keys", [(), ("left_square_bracket",) * 6 + ("full_stop",) * 6], ids=["logprob", "trainer-sampler"])
def test_token_view(snap_compare, deltas: list[dict], keys: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the view names its tokenizer relative to here
    app = TracewatchApp(training_engine(deltas, clock=lambda: NOW), tokenizers=Tokenizers(by_variant={"trainer": str(vocabulary.PATH)}))
    assert snap_compare(app, terminal_size=(120, 36), run_before=opened(*keys))
