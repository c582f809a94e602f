"""The real app against real demo servers under the real supervisor: what a user
calls "prove it". Every wait is a deadline poll through `pilot.pause`; the demo
servers run fast (`--speed`) but slow enough that live states can be seen."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from textual import events
from textual.pilot import Pilot
from textual.widgets import Static

from tests.support.demo_launch import launch, stop
from tests.support.demo_sessions import SPEED as ENGINE_SPEED
from tests.support.demo_sessions import demo_variant, server_pids, write_config
from tests.support.polling import alive, until
from tests.support.scripted_server import ScriptedServer, attached
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.session import variant as variant_module
from tracewatch.core.session.config import load_config
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.status import Status
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.chrome.screens import ConfirmScreen, QuitScreen
from tracewatch.tui.drawing.numbers import reward_text
from tracewatch.tui.run_views.variants_panel import _STEP as STEP_LABELS
from tracewatch.tui.trace.transcript import FOLLOW_SLACK, Transcript

TIMEOUT = 30.0
"""Generous: a loaded 2-core machine starts Python servers slowly. Waits end as soon
as their condition holds, so the deadline costs nothing when things go well."""

HEADER = re.compile(r"^▎ (\w+)  #(\d+)\b")
PENDING_TITLE = "┏━ pending · sent to the model"


def demo(name: str, scenarios: list[str], speed: float = 10, **settings: object) -> str:
    """test_engine's demo variant at this file's pace (its own is too fast to watch)."""
    text = demo_variant(name, scenarios, **settings)
    flag = f'"--speed", "{ENGINE_SPEED}"'
    assert flag in text
    return text.replace(flag, f'"--speed", "{speed:g}"')


@contextlib.asynccontextmanager
async def live(tmp_path: Path, *variants: str, size: tuple[int, int] = (120, 40)) -> AsyncIterator[tuple[TracewatchApp, LiveSession, Pilot]]:
    """The app over a real engine; afterwards every server is stopped, whatever the
    test asserted (a test that quits has stopped them already)."""
    engine = LiveSession(load_config(write_config(tmp_path, list(variants))), session_dir=tmp_path / "session")
    app = TracewatchApp(engine)
    try:
        async with app.run_test(size=size) as pilot:
            yield app, engine, pilot
    finally:
        if any(variant.can_cancel for variant in engine.variants.values()):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(engine.shutdown(), TIMEOUT)
        for variant in engine.variants.values():
            child = variant.child
            if child is not None and child.poll() is None:
                child.terminate(2.0)


def cell(app: TracewatchApp, key: str, column: str) -> str:
    return app.table.cell_text(key, column)


def row_keys(app: TracewatchApp) -> list[str]:
    return list(app.table.ordered_keys)


async def rows_shown(pilot: Pilot, app: TracewatchApp, engine: LiveSession, count: int) -> None:
    await until(
        pilot,
        lambda: len(engine.store.rollouts) == count and sorted(row_keys(app)) == sorted(engine.store.rollouts),
        f"{count} rows",
    )


async def select_row(pilot: Pilot, app: TracewatchApp, key: str) -> None:
    """Move the table's cursor to a row with the arrow keys, as a user would."""
    app.table.focus()
    steps = app.table.get_row_index(key) - app.table.cursor_row
    await pilot.press(*(["down"] * steps if steps > 0 else ["up"] * -steps))
    await until(pilot, lambda: app.selected == key and app.trace_pane.rollout is app.store.rollouts[key], f"{key} to be selected and shown")


def keys_at_once(app: TracewatchApp, *keys: str) -> None:
    """Keys as a terminal delivers fast typing or a paste: all queued before the
    first is handled (`pilot.press` waits for each)."""
    for key in keys:
        app.post_message(events.Key(key, "/" if key == "slash" else key if len(key) == 1 else None))


def screen_lines(transcript: Transcript) -> list[str]:
    return [transcript.render_line(y).text for y in range(transcript.scrollable_content_region.height)]


def headers(transcript: Transcript) -> list[tuple[str, int]]:
    """(role, node index) of every message header drawn, top to bottom."""
    return [(m[1], int(m[2])) for line in transcript.plain_lines() if (m := HEADER.match(line))]


def pending_messages(transcript: Transcript) -> list[dict] | None:
    """The pending block's messages if the transcript shows one (it is always last)."""
    blocks = [block for block in transcript._blocks if block.kind == "pending"]
    if not blocks:
        return None
    assert len(blocks) == 1 and blocks[0] is transcript._blocks[-1], "one pending block, after the turns"
    return blocks[0].source[0]


def signal_server(engine: LiveSession, name: str, signum: signal.Signals) -> None:
    """SIGSTOP/SIGCONT the demo server this test started (by its recorded pid), to hold
    a transient state (an unanswered cancel) long enough to see it."""
    _, server = server_pids(engine, name)
    if alive(server):
        os.kill(server, signum)


async def test_table_fills_with_every_rollout_and_follows_them(tmp_path: Path) -> None:
    """Every rollout gets a row; a running one's row shows where it is (the stuck one
    holds still mid-turn, so that is seen on any machine), and each ends as the store
    ends it (done, error for the failing one, cancelled for the stuck one)."""
    async with live(
        tmp_path,
        demo("base", ["normal", "failing", "normal"]),
        demo("cand", ["normal", "transient", "stuck"]),
    ) as (app, engine, pilot):
        store = engine.store
        await rows_shown(pilot, app, engine, 6)
        stuck = store.rollouts["cand/2"]
        seen: dict[str, list[tuple[str, str]]] = {key: [] for key in store.rollouts}

        def shows(rollout: Rollout) -> bool:
            return seen[rollout.key][-1] == (rollout.phase, str(rollout.turns))

        def look() -> None:
            for key, history in seen.items():
                shown = (cell(app, key, "phase"), cell(app, key, "turns"))
                if not history or history[-1] != shown:
                    history.append(shown)

        def stuck_mid_turn() -> bool:
            look()
            return stuck.status is Status.RUNNING and stuck.turns > 0 and stuck.phase == "agent" and shows(stuck)

        def settled() -> bool:
            look()
            return all(r.status.finished and shows(r) for r in store.rollouts.values() if r is not stuck)

        await until(pilot, stuck_mid_turn, "the stuck rollout's row to show it mid-turn")
        await until(pilot, settled, "every other rollout to finish and its row to say so")
        assert stuck.status is Status.RUNNING and seen["cand/2"][-1] == ("agent", str(stuck.turns))
        assert engine.cancel_rollout("cand/2")
        await until(pilot, lambda: stuck.status is Status.CANCELLED and cell(app, "cand/2", "phase") == "cancelled", "the stuck row cancelled")
        for key, rollout in store.rollouts.items():
            assert cell(app, key, "reward") == reward_text(rollout.reward)
            assert cell(app, key, "tokens") == f"{rollout.tokens:,}"
            assert cell(app, key, "trace") == next(iter(rollout.traces))[:8]
        for key in ("base/0", "base/2", "cand/0", "cand/1"):
            assert store.rollouts[key].status is Status.DONE and cell(app, key, "phase") == "done"
            turns = [int(turns) for _, turns in seen[key]]
            assert turns == sorted(turns) and turns[-1] == store.rollouts[key].turns > 0, (key, seen[key])
        assert store.rollouts["base/1"].status is Status.FAILED
        assert cell(app, "base/1", "phase") == "error" and cell(app, "base/1", "errors") != ""


async def test_turns_appear_in_order_in_the_transcript(tmp_path: Path) -> None:
    """The open transcript draws the store's nodes in their order as they land, never
    out of order, and ends with every node drawn once; a rollout still running shows
    the turns it has so far (the stuck one holds still mid-run, so that is seen on
    any machine)."""
    async with live(tmp_path, demo("solo", ["normal", "stuck"])) as (app, engine, pilot):
        await rows_shown(pilot, app, engine, 2)
        await select_row(pilot, app, "solo/0")
        await pilot.press("enter")
        transcript = app.trace_pane.transcript
        await until(pilot, lambda: app.focused is transcript, "the transcript to take focus")
        rollout = engine.store.rollouts["solo/0"]

        def expected(rollout: Rollout) -> list[tuple[str, int]]:
            trace = rollout.primary
            return [(n["message"]["role"], i) for i, n in enumerate(trace.nodes)] if trace else []

        def drawn_in_order() -> bool:
            drawn = headers(transcript)
            assert drawn == expected(rollout)[: len(drawn)], drawn
            return rollout.status.finished and drawn == expected(rollout)

        await until(pilot, drawn_in_order, "every node drawn")
        assert rollout.status is Status.DONE
        roles = [role for role, _ in headers(transcript)]
        assert roles[:4] == ["system", "user", "assistant", "tool"]
        assert roles[-1] == "assistant"
        rules = [line for line in transcript.plain_lines() if line.startswith("── turn ")]
        assert len(rules) == rollout.turns == roles.count("assistant")
        stuck = engine.store.rollouts["solo/1"]
        await select_row(pilot, app, "solo/1")
        await until(
            pilot,
            lambda: stuck.turns > 0 and stuck.status is Status.RUNNING and headers(transcript) == expected(stuck),
            "the stuck rollout's turns so far",
        )
        assert [role for role, _ in headers(transcript)] == ["system", "user", "assistant"]
        assert not stuck.status.finished


async def test_pending_preview_shows_then_clears_when_its_turn_commits(tmp_path: Path) -> None:
    """What the harness sent shows as one pending block, after the turns, until the
    model answers (the stuck rollout's call never does, so that is seen on any
    machine); a preview seen on the slow rollout never outlives the commit of its
    messages, which land as the next nodes; at the end no block is left."""
    async with live(tmp_path, demo("slowpoke", ["slow", "stuck"], speed=20)) as (app, engine, pilot):
        await rows_shown(pilot, app, engine, 2)
        await select_row(pilot, app, "slowpoke/0")
        transcript = app.trace_pane.transcript
        rollout = engine.store.rollouts["slowpoke/0"]
        previews: list[tuple[int, list[tuple[str, str]]]] = []
        """(committed nodes when first seen, the preview's (role, content))."""

        def watch() -> bool:
            messages = pending_messages(transcript)
            drawn = len(headers(transcript))
            if messages is not None:
                shown = [(m["role"], m["content"]) for m in messages]
                assert any(PENDING_TITLE in line for line in transcript.plain_lines())
                if previews and previews[-1][1] == shown:
                    assert previews[-1][0] == drawn, "a preview outlived the commit of its messages"
                else:
                    previews.append((drawn, shown))
            return rollout.status.finished and drawn == len(rollout.primary.nodes)

        await until(pilot, watch, "the slow rollout to finish")
        assert rollout.status is Status.DONE
        assert pending_messages(transcript) is None
        assert not any(PENDING_TITLE in line for line in transcript.plain_lines())
        committed = [(n["message"]["role"], n["message"]["content"]) for n in rollout.primary.nodes]
        for drawn, shown in previews:
            assert committed[drawn : drawn + len(shown)] == shown, "a preview commits as the next nodes"
            assert committed[drawn + len(shown)][0] == "assistant"
        stuck = engine.store.rollouts["slowpoke/1"]
        await select_row(pilot, app, "slowpoke/1")

        def stuck_preview_shown() -> bool:
            trace = stuck.primary
            return (
                trace is not None and stuck.turns > 0 and bool(trace.pending)
                and pending_messages(transcript) == trace.pending and len(headers(transcript)) == len(trace.nodes)
            )

        await until(pilot, stuck_preview_shown, "the stuck call's preview after its turns")
        assert {m["role"] for m in pending_messages(transcript) or []} == {"tool"}, "the tool results the model never got"
        assert any(PENDING_TITLE in line for line in transcript.plain_lines())
        assert not stuck.status.finished


async def test_c_cancels_the_stuck_rollout(tmp_path: Path) -> None:
    """`c` on a stuck rollout: its row says cancelling until the server answers, then
    cancelled; the store records the server's "aborted"; its sibling runs on."""
    async with live(tmp_path, demo("one", ["stuck", "normal"])) as (app, engine, pilot):
        store = engine.store
        stuck = store.rollouts["one/0"]
        await rows_shown(pilot, app, engine, 2)
        await until(pilot, lambda: stuck.turns > 0 and stuck.activity(store.clock())[0] == "generating", "the call that hangs")
        await select_row(pilot, app, "one/0")
        signal_server(engine, "one", signal.SIGSTOP)
        try:
            await pilot.press("c")
            assert stuck.status is Status.CANCELLING
            await until(pilot, lambda: cell(app, "one/0", "phase") == "cancelling", "the row to say cancelling")
        finally:
            signal_server(engine, "one", signal.SIGCONT)
        await until(pilot, lambda: cell(app, "one/0", "phase") == "cancelled", "the row to say cancelled")
        assert stuck.status is Status.CANCELLED and "aborted" in stuck.reason
        await until(pilot, lambda: cell(app, "one/1", "phase") == "done", "the other rollout to finish")
        await until(pilot, lambda: engine.variants["one"].state is VariantState.DONE, "the variant to finish")


async def test_x_then_y_cancels_the_stuck_variant_and_its_processes(tmp_path: Path) -> None:
    """`x` asks, `y` cancels the selected rollout's variant: the card shows each step,
    the variant ends cancelled with its supervisor and server gone; the other
    variant is untouched."""
    # a grace far longer than the test holds the server stopped: SIGTERM, sent while it
    # is stopped, is what ends it once it runs again, however slow the machine
    async with live(
        tmp_path, demo("stuck", ["stuck", "stuck"], grace_seconds=60.0), demo("calm", ["normal"]), size=(200, 50)
    ) as (app, engine, pilot):
        store = engine.store
        variant = engine.variants["stuck"]
        card = app.cards["stuck"]
        await rows_shown(pilot, app, engine, 3)
        await until(pilot, lambda: all(store.rollouts[k].turns > 0 for k in ("stuck/0", "stuck/1")), "both stuck runs mid-turn")
        pids = server_pids(engine, "stuck")
        assert all(alive(pid) for pid in pids)
        await select_row(pilot, app, "stuck/1")
        signal_server(engine, "stuck", signal.SIGSTOP)
        try:
            await pilot.press("x")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
            await pilot.press("y")
            first_step = STEP_LABELS["cancel-runs"]
            await until(pilot, lambda: first_step in card.body.visual.plain, "the card to show the first step")
            assert "stuck  cancelling" in card.body.visual.plain
            assert "cancelling 2 run(s) over the wire" in str(card.tooltip)
            assert str(card.cancel.label) == "Kill"
        finally:
            signal_server(engine, "stuck", signal.SIGCONT)
        await until(pilot, lambda: variant.state is VariantState.CANCELLED, "the variant to be cancelled")
        await until(pilot, lambda: "stuck  cancelled" in card.body.visual.plain, "the card to say cancelled")
        assert "server stopped with SIGTERM" in (variant.outcome_text or "") and variant.outcome_text in card.body.visual.plain
        assert [e.kind for e in variant.escalation][:2] == ["cancel-runs", "sigterm"]
        assert not any(alive(pid) for pid in pids)
        assert all(store.rollouts[k].status is Status.CANCELLED for k in ("stuck/0", "stuck/1"))
        await until(pilot, lambda: engine.variants["calm"].state is VariantState.DONE, "the other variant to finish")
        assert store.rollouts["calm/0"].status is Status.DONE


async def test_each_variant_is_stalled_at_its_own_stall_seconds_everywhere(tmp_path: Path) -> None:
    """Two variants whose rollouts hang alike, one with `stall_seconds` 1, one with 600:
    past a second of silence only the first is stalled, in its activity cell, under
    `status:stalled` and in the status line's count (one store-wide threshold, the
    smaller, made both stalled)."""
    async with live(tmp_path, demo("quick", ["stuck"], stall_seconds=1.0), demo("patient", ["stuck"], stall_seconds=600.0)) as (app, engine, pilot):
        store = engine.store
        await rows_shown(pilot, app, engine, 2)
        keys = ("quick/0", "patient/0")
        await until(
            pilot, lambda: all(store.rollouts[k].turns > 0 and store.rollouts[k].idle(store.clock()) > 2.0 for k in keys), "both hanging, silent 2 s"
        )
        assert cell(app, "quick/0", "activity").startswith("⚠")
        assert not cell(app, "patient/0", "activity").startswith("⚠"), cell(app, "patient/0", "activity")
        await pilot.press("slash", *"status:stalled", "enter")
        status = app.query_one("#status", Static)
        await until(pilot, lambda: " · 1 shown" in str(status.render()), "the filter's rows counted")
        assert row_keys(app) == ["quick/0"]
        assert " · 1 stalled" in str(status.render()), str(status.render())


async def test_a_multi_agent_rollouts_reward_says_what_it_is_where_it_is_shown(tmp_path: Path) -> None:
    """The demo's solver scores 1.50 and its judge 0.00: the table shows the rollout's
    reward, 0.75, and each trace's outcome says its own reward and the rollout's, the
    mean of the two (it said `reward 1.50` where the table said 0.75)."""
    async with live(tmp_path, demo("duo", ["multi-agent"], speed=40)) as (app, engine, pilot):
        rollout = engine.store.rollouts["duo/0"]
        await rows_shown(pilot, app, engine, 1)
        await until(pilot, lambda: rollout.status is Status.DONE, "the episode scored", timeout=TIMEOUT)
        assert cell(app, "duo/0", "reward") == "0.75"
        await select_row(pilot, app, "duo/0")
        transcript = app.trace_pane.transcript
        said = lambda words: any(words in line for line in transcript.plain_lines())  # noqa: E731
        await until(pilot, lambda: said("trace reward 1.50 · rollout reward 0.75, the mean of 2 scored traces"), "the solver's outcome")
        assert not said("━━ outcome · reward")
        switcher = await until(pilot, lambda: app.trace_pane.switcher)
        switcher.value = rollout.trace_ids[1]
        await until(pilot, lambda: said("trace reward 0.00 · rollout reward 0.75, the mean of 2 scored traces"), "the judge's outcome")


async def test_filter_narrows_the_live_table(tmp_path: Path) -> None:
    """`status:running` keeps only what runs, dropping rows as they finish; a typed
    filter moves the selection into view, one that leaves by itself keeps it until
    the user moves; text typed fast after `/` all
    lands in the filter; a variant name keeps that variant's rows; an empty filter
    shows every row again."""
    async with live(tmp_path, demo("alpha", ["normal", "stuck"], speed=20), demo("beta", ["normal"], speed=20)) as (app, engine, pilot):
        store = engine.store
        await rows_shown(pilot, app, engine, 3)
        filter_input = app.query_one("#filter")
        await pilot.press("slash", *"status:running")
        assert app.focused is filter_input
        await until(
            pilot,
            lambda: row_keys(app) == ["alpha/1"] and store.rollouts["alpha/0"].status.finished and store.rollouts["beta/0"].status.finished,
            "only the stuck rollout to remain",
        )
        assert store.rollouts["alpha/1"].status is Status.RUNNING
        await pilot.press("enter")
        assert app.focused is app.table
        if app.table.pinned:  # alpha/0 ended after the filter was typed: the selection stayed with it
            assert app.selected == "alpha/0"
            await pilot.press("down")
        # else it ended while the filter was typed, which moved the selection into view
        await until(pilot, lambda: app.selected == "alpha/1", "the stuck rollout selected")
        await pilot.press("slash", "ctrl+u", "enter")
        await until(pilot, lambda: len(row_keys(app)) == 3 and not filter_input.display, "every row back")
        assert app.focused is app.table and app.selected == "alpha/1"
        # typed fast: every key reaches the filter, none is a command (`c` would
        # cancel the selected, stuck rollout)
        keys_at_once(app, "slash", *"stuck")
        await until(pilot, lambda: filter_input.value == "stuck", "the whole text in the filter")
        await until(pilot, lambda: row_keys(app) == ["alpha/1"], "the stuck task's row only")
        assert store.rollouts["alpha/1"].status is Status.RUNNING
        await pilot.press("ctrl+u", *"variant:beta")
        await until(pilot, lambda: row_keys(app) == ["beta/0"], "beta's row only")
        await pilot.press("ctrl+u")
        await until(pilot, lambda: sorted(row_keys(app)) == ["alpha/0", "alpha/1", "beta/0"], "every row back")
        await pilot.press("escape")
        assert app.focused is app.table and not filter_input.display


async def test_follow_and_the_new_badge_on_a_live_trace(tmp_path: Path) -> None:
    """Scrolled up, new turns leave the view where it is and count on a badge; a click
    on the badge, or `end`, jumps to the bottom and follows again. The server is held
    (SIGSTOP) while the test scrolls and clicks and let go only to wait for news, so
    the rollout cannot end before the test is done with it on any machine."""
    async with live(tmp_path, demo("long", ["slow"], speed=10)) as (app, engine, pilot):
        await rows_shown(pilot, app, engine, 1)
        await select_row(pilot, app, "long/0")
        await pilot.press("enter")
        transcript = app.trace_pane.transcript
        rollout = engine.store.rollouts["long/0"]
        height = transcript.scrollable_content_region.height

        async def news_while_running(condition: Callable[[], bool], what: str) -> None:
            """Let the held server go on until `condition`, then hold it again."""
            signal_server(engine, "long", signal.SIGCONT)
            try:
                await until(pilot, condition, what)
            finally:
                signal_server(engine, "long", signal.SIGSTOP)
            assert not rollout.status.finished, "the slow rollout must outlast the test's looks"

        signal_server(engine, "long", signal.SIGSTOP)
        try:
            await news_while_running(lambda: transcript.virtual_size.height > height + 2 * FOLLOW_SLACK, "a transcript taller than its view")
            await until(pilot, lambda: transcript.scroll_y == transcript.max_scroll_y, "the view at the bottom")
            assert transcript.following

            async def scroll_up_and_wait_for_news() -> None:
                await pilot.press("home")
                await until(pilot, lambda: transcript.scroll_y == 0 and not transcript.following, "the view at the top")
                drawn, counted = len(headers(transcript)), transcript.new_since_left
                await news_while_running(lambda: transcript.new_since_left > counted, "a new message while scrolled up")
                await until(pilot, lambda: len(headers(transcript)) - drawn == transcript.new_since_left - counted, "every new message counted")
                assert transcript.scroll_y == 0 and not transcript.following, "the view must not move"
                await until(pilot, lambda: f"+{transcript.new_since_left} new ↓" in screen_lines(transcript)[-1], "the badge")

            def following_at_bottom() -> bool:
                return transcript.following and transcript.new_since_left == 0 and transcript.scroll_y >= transcript.max_scroll_y - FOLLOW_SLACK

            await scroll_up_and_wait_for_news()
            region = transcript.scrollable_content_region
            await pilot.click(transcript, offset=(region.width - 3, region.height - 1))
            await until(pilot, following_at_bottom, "the badge click to resume following")
            await scroll_up_and_wait_for_news()
            await pilot.press("end")
            await until(pilot, following_at_bottom, "end to resume following")
            assert "new ↓" not in screen_lines(transcript)[-1]
            lines = transcript.virtual_size.height
            await news_while_running(lambda: transcript.virtual_size.height > lines, "more of the trace")
            await until(pilot, lambda: transcript.scroll_y == transcript.max_scroll_y, "the view to follow it")
        finally:
            signal_server(engine, "long", signal.SIGCONT)


async def test_q_leaves_no_child_process(tmp_path: Path) -> None:
    """Quitting mid-run cancels every run, stops every server and supervisor, and
    only then exits: no process of the session outlives the app."""
    async with live(tmp_path, demo("a", ["stuck", "normal"]), demo("b", ["normal", "stuck"])) as (app, engine, pilot):
        store = engine.store
        await rows_shown(pilot, app, engine, 4)
        await until(pilot, lambda: store.rollouts["a/0"].turns > 0 and store.rollouts["b/1"].turns > 0, "the stuck runs mid-turn")
        pids = server_pids(engine, "a") + server_pids(engine, "b")
        assert all(alive(pid) for pid in pids)
        assert session_processes(tmp_path / "session")
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen) or app.return_code is not None, "the quit screen")
        await until(pilot, lambda: app.return_code is not None, "the app to exit")
    assert app.return_code == 0
    assert not [pid for pid in pids if alive(pid)]
    assert not session_processes(tmp_path / "session")
    assert {store.rollouts[k].status for k in ("a/0", "b/1")} == {Status.CANCELLED}
    assert all(v.state is VariantState.CANCELLED for v in engine.variants.values())


def session_processes(session_dir: Path) -> list[int]:
    """Live processes whose command line names this session's directory (the
    supervisors: their record and capture paths are under it)."""
    marker = str(session_dir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_cancelling_an_attached_variant_promises_no_signal_and_sends_none(tmp_path: Path) -> None:
    """`x` on a variant attached to someone else's server: the confirmation says the
    runs are cancelled and the server is left running, and it is."""
    server, address = launch(speed=10)
    try:
        attached = "\n".join([
            "[[variants]]", 'name = "theirs"', f'attach = "{address}"', 'model = "demo-model"',
            'tasks = [{ id = "s", name = "stuck task", prompt = "p", scenario = "stuck", kind = "coding" }]',
        ]) + "\n"  # fmt: skip
        async with live(tmp_path, attached) as (app, engine, pilot):
            variant = engine.variants["theirs"]
            await rows_shown(pilot, app, engine, 1)
            await until(pilot, lambda: engine.store.rollouts["theirs/0"].turns > 0, "the stuck run mid-turn")
            await select_row(pilot, app, "theirs/0")
            await pilot.press("x")
            screen = await until(pilot, lambda: app.screen if isinstance(app.screen, ConfirmScreen) else None, "the confirmation")
            question = screen.question.plain
            assert "SIGTERM" not in question and "SIGKILL" not in question
            assert f"Its server at {address} is not ours: it is left running." in question
            await pilot.press("y")
            await until(pilot, lambda: variant.state is VariantState.CANCELLED, "the variant to be cancelled")
            assert engine.store.rollouts["theirs/0"].status is Status.CANCELLED
            assert not any(e.kind in ("sigterm", "sigkill") for e in variant.escalation)
        assert server.poll() is None, "someone else's server keeps running"
    finally:
        stop(server)


async def test_c_twice_asks_the_server_to_abort_the_run_once(tmp_path: Path, monkeypatch) -> None:
    """A second `c`, and the variant's stop after it, leave the run to the first
    cancel: the server (which never answers it) is asked once, and the user is told."""
    monkeypatch.setattr(variant_module, "CANCEL_ANSWER_WAIT", 600.0)  # the cancel stays open through the test
    async with ScriptedServer({}) as server:  # no script: the run waits
        server.cancel_reply = None
        server.abort_on_cancel = False
        engine = LiveSession(attached(server.address, ["silent"], tmp_path), session_dir=tmp_path / "session")
        app = TracewatchApp(engine)
        async with app.run_test(size=(120, 40)) as pilot:
            rollout = engine.store.rollouts["remote/0"]
            await until(pilot, lambda: rollout.status is Status.RUNNING, "the run started", TIMEOUT)
            await select_row(pilot, app, "remote/0")
            await pilot.press("c")
            await until(pilot, lambda: server.cancels == [rollout.request_id], "the cancel at the server", TIMEOUT)
            await pilot.press("c")
            await until(pilot, lambda: any("already cancelling" in n.message for n in app._notifications), "the second c answered")
            await asyncio.wait_for(engine.shutdown(), TIMEOUT)
        assert rollout.status is Status.CANCELLED
        assert server.cancels == [rollout.request_id]


async def test_the_filters_no_match_hint_goes_when_matching_rollouts_finish(tmp_path: Path) -> None:
    """An outcome filter typed before anything finished matches nothing, and says so;
    as the rollouts finish with their reward the rows come and the hint goes, with no
    keystroke. It was judged only at a keystroke and stayed under the rows."""
    async with live(tmp_path, demo("solo", ["slow", "slow"])) as (app, engine, pilot):
        store = engine.store
        await rows_shown(pilot, app, engine, 2)
        await pilot.press("slash", *"reward:>=1")
        hint = app.query_one("#filter-hint", Static)
        await until(pilot, lambda: hint.display and "no rollout matches" in str(hint.render()), "the no-match hint")
        assert not any(r.status.finished for r in store.rollouts.values()), "typed before anything finished"
        await until(pilot, lambda: all(r.status is Status.DONE for r in store.rollouts.values()), "both rollouts done")
        await until(pilot, lambda: app.table.row_count == 2 and not hint.display, f"the rows and no hint; the hint says {hint.render()!s}")
