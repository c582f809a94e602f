"""A hostile run folder in the real app (run_test): every rollout selected, every tab
shown (transcript, timing, logs, compare, timeline, trends) and the token view of
every message that has tokens, for generated verifiers run directories whose numbers
break arithmetic (a logprob of 710 overflows exp, rewards of 1e308 overflow their
mean and spread, integers past 64 bits, NaN, infinities) and whose episodes are
changed where readers look. Each is drawn; the app never exits on one."""

from __future__ import annotations

import asyncio
import copy
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings

from tests.support.hostile_run_dirs import HostileRun, base_episodes, hostile_runs
from tests.support.polling import until
from tracewatch.core.engine.opened import open_folder
from tracewatch.core.recordings.run_dir import RunDirError
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.tokens.token_view import TokenScreen


def numbered(episodes: list[dict]) -> HostileRun:
    lines = []
    for number, episode in enumerate(episodes):
        episode["id"] = f"episode-{number}"
        lines.append(json.dumps(episode).encode() + b"\n")
    return HostileRun(lines, {}, "good")


def logprobs_of(value: float) -> HostileRun:
    """The training rollout with every logprob `value`."""
    episode = copy.deepcopy(base_episodes()[-2])
    for node in episode["traces"][0]["nodes"]:
        if node.get("logprobs"):
            node["logprobs"] = [value] * len(node["logprobs"])
    return numbered([episode, copy.deepcopy(base_episodes()[-2])])


def rewards_of(value: float) -> HostileRun:
    """Two rollouts of a task, one rewarded `value`."""
    first, second = copy.deepcopy(base_episodes()[0]), copy.deepcopy(base_episodes()[0])
    first["traces"][0]["rewards"]["correct"]["score"] = value
    return numbered([first, second])


async def visit_everything(path: Path) -> None:
    try:
        session = open_folder(path)
    except RunDirError:
        return  # no line is an episode: the command says so, exit 2 (tests/integration/test_hostile_run_dirs.py)
    app = TracewatchApp(session)
    async with app.run_test(size=(140, 45)) as pilot:
        await until(pilot, lambda: app.table.row_count == len(session.store.rollouts))
        for tab in "23456":
            await pilot.press(tab)
            await pilot.pause()
        await pilot.press("1")
        for key in list(session.store.rollouts):
            app.table.select(key)
            await until(pilot, lambda key=key: app.selected == key)
            trace = app.trace_pane.transcript.trace_state
            if trace is not None and any(node.get("token_ids") for node in trace.nodes):
                await pilot.press("t")
                await until(pilot, lambda: isinstance(app.screen, TokenScreen))
                for _ in range(len(app.screen.streams) + 1):  # each stream's colours, the values under the cursor
                    await pilot.press("period", "right", "end", "left")
                await pilot.press("bracketleft", "right")  # the message before
                await pilot.press("escape")
                await until(pilot, lambda: not isinstance(app.screen, TokenScreen))
        for tab in "2456":
            await pilot.press(tab)
            await pilot.pause()
        assert app.is_running
    assert app.return_code in (0, None)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(run=hostile_runs())
@example(run=logprobs_of(710.0))
@example(run=logprobs_of(1e308))
@example(run=rewards_of(1e308))
@example(run=rewards_of(2**70))
def test_every_view_draws_a_hostile_run(run: HostileRun) -> None:
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(visit_everything(run.write(Path(folder) / "run")))
