"""A prime-rl run followed in the real app (run_test) while prime-rl's orchestrator and
trainer write it on a thread (`tests/support/prime_rl_orchestrator.RunWriter`): every
episode one row with its reward and step, the rows seen in flight finished in place,
and an opened episode's tokens carrying the trainer's streams."""

from __future__ import annotations

import pytest

from tests.support.polling import MARGIN, until, wait_until
from tests.support.prime_rl_orchestrator import RunWriter, Script, trainer_value
from tracewatch.core.engine.followed_run import FollowedRun
from tracewatch.core.recordings.prime_rl.layout import StreamRun, detect
from tracewatch.core.session.status import Status
from tracewatch.core.tokens.streams import read_message, token_values
from tracewatch.tui.app import TracewatchApp


def layout_of(out) -> StreamRun:
    found = wait_until(lambda: detect(out), timeout=MARGIN, what="the run's folder")
    assert isinstance(found, StreamRun)
    return found


def by_key(writer: RunWriter) -> dict[str, object]:
    """Each landed rollout under both names a row may take: its dispatch id (seen
    live) and its episode id (never seen live)."""
    found: dict[str, object] = {}
    for rollout in writer.landed:
        found[rollout.dispatch_id] = found[rollout.episode_id] = rollout
    return found


async def test_a_followed_run_shows_every_episode_once_with_its_reward_and_step(tmp_path):
    writer = RunWriter(tmp_path / "out", Script(episodes=24, concurrent=6, pause=0.05)).start()
    session = FollowedRun(layout_of(tmp_path / "out"))
    app = TracewatchApp(session)
    store = session.store
    async with app.run_test(size=(160, 40)) as pilot:

        def all_landed() -> bool:
            finished = [r for r in store.rollouts.values() if r.status.finished]
            return writer.done.is_set() and len(finished) == len(writer.landed) == len(store.rollouts)

        landed = lambda: f"every episode landed and finished; writer done {writer.done.is_set()}, {len(writer.landed)} written, {len(store.rollouts)} rows, {sum(r.status.finished for r in store.rollouts.values())} finished"  # noqa: E731
        await until(pilot, all_landed, landed, timeout=120)
        writer.join()
        await until(pilot, lambda: app.table.row_count == len(writer.landed), lambda: f"a row for each of the {len(writer.landed)} episodes; {app.table.row_count} shown")
        written = by_key(writer)
        rows = {key: written[key.rsplit("/", 1)[1]] for key in app.table.ordered_keys}
        assert len({id(rollout) for rollout in rows.values()}) == len(writer.landed), "every episode once"
        live = [key for key in rows if key.rsplit("/", 1)[1].startswith("d-")]
        assert live, "some rollouts were followed in flight"
        for key, rollout in rows.items():
            row = store.rollouts[key]
            assert row.status is Status.DONE, (key, row.reason)
            assert row.reward == rollout.reward  # type: ignore[attr-defined]
            assert row.variant == f"{rollout.kind}:{rollout.env}"  # type: ignore[attr-defined]
        # a step came with its dispatch, or from its record once the run was caught up
        await until(
            pilot,
            lambda: all(app.table.cell_text(key, "step") == str(rollout.step) for key, rollout in rows.items()),  # type: ignore[attr-defined]
            lambda: f"each row's step; these differ: {[(key, app.table.cell_text(key, 'step'), rollout.step) for key, rollout in rows.items() if app.table.cell_text(key, 'step') != str(rollout.step)]}",  # type: ignore[attr-defined]
        )
        assert "step" in app.table.columns_shown and "used" in app.table.columns_shown
        # the orchestrator's annotations say which the trainer used: a column and a filter
        used = sorted(key for key, rollout in rows.items() if rollout.trace.id in writer.shipped)  # type: ignore[attr-defined]
        assert used
        await until(pilot, lambda: all(app.table.cell_text(key, "used") == "yes" for key in used), lambda: f"'yes' under used for {used}; not yet: {[key for key in used if app.table.cell_text(key, 'used') != 'yes']}")
        assert all(app.table.cell_text(key, "used") == "" for key in rows if key not in used)
        await pilot.press("slash", *"used:1")
        await until(pilot, lambda: sorted(app.table.ordered_keys) == used, lambda: f"used:1 to show {used}; it shows {sorted(app.table.ordered_keys)}")
    await session.shutdown()


async def test_an_opened_episode_shows_the_trainer_s_streams_on_its_tokens(tmp_path):
    writer = RunWriter(tmp_path / "out", Script(episodes=12, concurrent=4, ship_every=3))
    writer.run()
    assert writer.error is None
    session = FollowedRun(layout_of(tmp_path / "out"), follow=False).snapshot()
    shipped = [r for r in writer.landed if r.trace.id in writer.shipped]
    assert shipped
    key = next(k for k in session.store.rollouts if k.endswith(shipped[0].episode_id))
    app = TracewatchApp(session)
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count == len(writer.landed), lambda: f"a row for each of the {len(writer.landed)} episodes; {app.table.row_count} shown")
        app.table.select(key)
        await until(pilot, lambda: bool(session.store.rollouts[key].traces), f"the selected episode {key}'s trace read")
        (trace,) = session.store.rollouts[key].traces.values()
        sampled = [n for n, node in enumerate(trace.nodes) if any(node["mask"])]
        assert sampled
        for n in sampled:
            tokens = read_message(trace.nodes[n])
            on = [j for j, masked in enumerate(trace.nodes[n]["mask"]) if masked]
            for j in on:
                values = token_values(tokens, j)
                assert values["trainer_logprobs"] == pytest.approx(trainer_value(n, j)), (n, j)
                assert values["entropies"] == pytest.approx(-trainer_value(n, j))
                assert values["advantages"] == 0.5
                assert values["is_masked"] is False


async def test_the_history_of_a_followed_run_gets_its_steps_from_its_records(tmp_path):
    """A run followed after it wrote its episodes: none was seen live, and the index
    has no step; their records give it once the run is caught up."""
    writer = RunWriter(tmp_path / "out", Script(episodes=12, concurrent=4, ship_every=3))
    writer.run()
    assert writer.error is None
    session = FollowedRun(layout_of(tmp_path / "out"))
    app = TracewatchApp(session)
    written = by_key(writer)
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count == len(writer.landed), lambda: f"a row for each of the {len(writer.landed)} episodes; {app.table.row_count} shown")
        keys = list(app.table.ordered_keys)
        assert all(not key.rsplit("/", 1)[1].startswith("d-") for key in keys), "nothing was seen live"
        step = lambda key: str(written[key.rsplit("/", 1)[1]].step)  # type: ignore[attr-defined]  # noqa: E731
        await until(
            pilot,
            lambda: all(app.table.cell_text(key, "step") == step(key) for key in keys),
            lambda: f"each row's step from its record; these differ: {[(key, app.table.cell_text(key, 'step'), step(key)) for key in keys if app.table.cell_text(key, 'step') != step(key)]}",
        )
    await session.shutdown()
