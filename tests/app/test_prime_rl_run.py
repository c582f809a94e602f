"""A prime-rl training run opened in the real app (run_test): the step as a column and a
filter, and the token view on one of its rollouts with the trainer's streams."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.polling import until
from tests.support.prime_rl_run import credited, log_episodes, renamed, verifiers_agent
from tests.support.training_session import training_episode
from tracewatch.core.demo import vocabulary
from tracewatch.core.engine.opened import open_folder
from tracewatch.core.tokens.streams import read_message, token_values
from tracewatch.core.tokens.tokenizer import Tokenizers
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.tokens.token_view import TokenScreen

TOKENIZER = Tokenizers(by_variant={"train": str(vocabulary.PATH)})


@pytest.fixture(scope="module")
def episode() -> dict:
    return verifiers_agent(asyncio.run(training_episode()))


def training_run(out: Path, episode: dict) -> Path:
    """Steps 1 to 3, two train rollouts each, step 2's first trained on (in `effective`
    with its credit), and an eval at step 3."""
    for step in (1, 2, 3):
        log_episodes(out, [renamed(episode, 2 * step), renamed(episode, 2 * step + 1)], step, "train", "all")
    log_episodes(out, [credited(renamed(episode, 4), 0.5)], 2, "train", "effective")
    log_episodes(out, [renamed(episode, 99)], 3, "eval", "all")
    return out


async def test_the_step_is_a_column_and_a_filter(tmp_path, episode):
    app = TracewatchApp(open_folder(training_run(tmp_path / "outputs", episode)))
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count == 7, lambda: f"the run's 7 rows; {app.table.row_count} shown")
        assert "step" in app.table.columns_shown
        assert [app.table.cell_text(key, "step") for key in app.table.ordered_keys] == ["1", "1", "2", "2", "3", "3", "3"]
        await pilot.press("slash", *"step:2")
        await until(pilot, lambda: app.table.ordered_keys == ["train/2", "train/3"])
        await pilot.press("ctrl+u", *"step:>=3 variant:eval")
        await until(pilot, lambda: app.table.ordered_keys == ["eval/0"])


async def test_a_session_without_steps_has_no_step_column(tmp_path, episode):
    from tests.support.training_session import training_deltas, training_engine

    app = TracewatchApp(training_engine(await training_deltas()))
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count == 1)
        assert "step" not in app.table.columns_shown


async def test_the_token_view_shows_a_trained_rollouts_streams(tmp_path, episode):
    session = open_folder(training_run(tmp_path / "outputs", episode))
    app = TracewatchApp(session, tokenizers=TOKENIZER)
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count == 7, lambda: f"the run's 7 rows; {app.table.row_count} shown")
        (trace,) = session.store.rollouts["train/2"].traces.values()
        app.table.select("train/2")
        await until(pilot, lambda: app.trace_pane.transcript.trace_state is trace)
        await pilot.press("t")
        screen = await until(pilot, lambda: isinstance(app.screen, TokenScreen) and app.screen.lines.tokens is not None and app.screen)
        assert screen.node == len(trace.nodes) - 1
        tokens = screen.lines.tokens
        assert tokens is not None
        written = episode["traces"][0]["nodes"][-1]
        assert list(tokens.ids) == written["token_ids"]
        first = written["mask"].index(True)
        await pilot.press(*["right"] * first)
        values = token_values(tokens, first)
        assert values == token_values(read_message(trace.nodes[-1]), first)
        assert values["advantages"] == 0.5 and values["trainer_logprobs"] == pytest.approx(round(written["trainer_logprobs"][0], 4))
        at = lambda: str(screen.query_one("#tokens-at").render())  # noqa: E731
        expected = (f"advantages {0.5:.4f}", f"trainer_logprobs {values['trainer_logprobs']:.4f}")
        # the line under the tokens is redrawn on the app's refresh after the last key
        await until(
            pilot,
            lambda: screen.lines.cursor == first and all(part in at() for part in expected),
            lambda: f"the cursor on token {first} and {expected} under it; cursor at {screen.lines.cursor}, the line reads {at()!r}",
        )
