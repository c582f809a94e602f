"""Compare variants task by task: the numbers, `tracewatch compare`, the Compare tab."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual.widgets import Static

from tests.support.app_screen import more_ticks, open_side_by_side, screen_text
from tests.support.polling import until
from tests.support.tui_standin import StandInEngine, StandInVariant, feed, make_engine, write_recording
from tracewatch.cli import main
from tracewatch.core.session.compare import compare, compare_lines, compare_store
from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views import compare_view
from tracewatch.tui.run_views.compare_view import CompareView
from tracewatch.tui.run_views.side_by_side import Side, SideBySideScreen
from tracewatch.tui.trace.transcript import Transcript


def scored(store: RolloutStore, variant: str, task: int, rewards: list[float | None | str]) -> None:
    """Each rollout's one message names it (`[b] reply of b/1 to task 2`), markup-like
    on purpose: the transcript must draw it literally. None: it failed (no reward);
    "cancelled": it was cancelled."""
    for index, reward in enumerate(rewards):
        rollout = store.add_rollout(variant, task, {"name": f"task {task}"}, index)
        store.started(rollout.key, f"r-{rollout.key}", t=0.0)
        if reward is None or reward == "cancelled":
            store.failed(rollout.key, "provider error" if reward is None else "cancelled by the user", cancelled=reward == "cancelled", t=2.0)
        else:
            store.apply_delta(rollout.key, {"trace": f"t-{rollout.key}", "open": {"id": f"t-{rollout.key}"}, "set": {"rewards": {"r": {"score": reward, "weight": 1.0}}}}, t=0.0)
            message = {"role": "assistant", "content": f"[b]reply of {variant}/{index} to task {task}"}
            store.apply_delta(rollout.key, {"trace": f"t-{rollout.key}", "nodes": [{"parent": None, "message": message, "sampled": True}]})
            store.finished(rollout.key, {"traces": [dict(rollout.assembly.traces[f"t-{rollout.key}"])]}, t=2.0)


def test_per_task_cells_means_with_standard_error_and_disagreements() -> None:
    store = RolloutStore()
    scored(store, "a", 0, [1.0, 0.0])
    scored(store, "a", 1, [0.0, 0.0])
    scored(store, "b", 0, [0.0, 0.0])
    scored(store, "b", 1, [1.0, 1.0])
    comparison = compare_store(store)
    assert list(comparison.tasks) == [(0, "task 0"), (1, "task 1")]
    a0, b0 = comparison.tasks[(0, "task 0")]["a"], comparison.tasks[(0, "task 0")]["b"]
    assert (a0.k, a0.passed, a0.mean) == (2, True, 0.5)
    assert (b0.k, b0.passed, b0.mean) == (2, False, 0.0)
    assert comparison.disagreements() == [(0, "task 0"), (1, "task 1")]
    a = comparison.summary("a")
    assert a.mean == 0.25 and a.passed == 1 and a.tasks == 2
    assert math.isclose(a.stderr, math.sqrt((3 * 0.25**2 + 0.75**2) / 3 / 4))


def test_failed_and_cancelled_rollouts_are_counted_apart_not_as_reward_zero() -> None:
    """The mean is over rollouts that finished with a reward: a provider error or a
    cancel says nothing about the variant's answers, so it is counted in its own
    column (and in the summary), not averaged in as 0."""
    store = RolloutStore()
    scored(store, "a", 0, [1.0, None, "cancelled"])
    scored(store, "a", 1, [None, None])
    scored(store, "b", 0, [0.0, 0.0])
    scored(store, "b", 1, [0.0])
    comparison = compare_store(store)
    a0 = comparison.tasks[(0, "task 0")]["a"]
    assert (a0.k, a0.mean, a0.passed, a0.failed, a0.cancelled) == (1, 1.0, True, 1, 1)
    a1 = comparison.tasks[(1, "task 1")]["a"]
    assert (a1.k, a1.mean, a1.passed, a1.failed) == (0, None, False, 2)
    assert comparison.disagreements() == [(0, "task 0")], "a task a never scored is no disagreement"
    a = comparison.summary("a")
    assert (a.mean, a.stderr, a.scored, a.passed, a.tasks, a.failed, a.cancelled) == (1.0, None, 1, 1, 1, 3, 1)
    lines = compare_lines(comparison)
    assert lines[0].split() == ["task", "a", "fail", "cxl", "b", "fail", "cxl"]
    assert lines[2].split() == ["task", "0", "1.00", "(1/1)", "1t", "2.0s", "1", "1", "0.00", "(0/2)", "1t", "2.0s", "←", "differ"]
    assert lines[3].split() == ["task", "1", "–", "2", "0.00", "(0/1)", "1t", "2.0s"]
    assert "a: mean reward 1.000 over 1 scored · pass@k 1/1 tasks · 3 failed · 1 cancelled" in lines


def test_tracewatch_compare_puts_sources_side_by_side(tmp_path: Path, capsys) -> None:
    first, second = tmp_path / "one.twrec", tmp_path / "two.twrec"
    write_recording(first)
    write_recording(second)
    assert main(["compare", str(first), str(second)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["task", *(word for name in ("baseline", "candidate", "two:baseline", "two:candidate") for word in (name, "fail", "cxl"))]
    assert any(line.startswith("baseline: mean reward 0.") and "pass@k" in line for line in out)
    assert out[-1].startswith("variants disagree on 0 of ")


async def test_the_compare_tab() -> None:
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        await pilot.press("4")
        view = app.query_one(CompareView)
        text = await until(pilot, lambda: view.display and str(view.render().renderables[2]))
        assert "baseline  mean reward" in text and "variants disagree on 0 of" in text
        assert compare({"x": []}).tasks == {}


def shown(transcript: Transcript) -> str:
    return "\n".join(transcript.render_line(y).text for y in range(transcript.scrollable_content_region.height))


async def test_a_task_opens_its_traces_side_by_side_and_each_side_cycles_its_rollouts() -> None:
    store = RolloutStore(clock=lambda: 10.0)
    scored(store, "a", 0, [1.0])
    scored(store, "b", 0, [0.0])
    scored(store, "a", 1, [1.0, 0.0])
    scored(store, "b", 1, [1.0, 0.0, None])
    engine = StandInEngine(store, {name: StandInVariant(name, store) for name in ("a", "b")})
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        view, screen, left, right = await open_side_by_side(app, pilot, 7, "down", "enter")
        assert screen.shown_task == (1, "task 1") and (left.variant, right.variant) == ("a", "b")
        await until(pilot, lambda: "[b]reply of a/0 to task 1" in shown(left.transcript))
        await until(pilot, lambda: "[b]reply of b/0 to task 1" in shown(right.transcript))
        assert "reply of b" not in shown(left.transcript) and "reply of a" not in shown(right.transcript)
        head = str(right.head.render())
        assert "b · variant 2 of 2\nrollout #1 (1/3) · reward 1.00 · done" in head, head
        await pilot.press("right", "full_stop", "full_stop")
        await until(pilot, lambda: "(3/3) · reward – · failed · provider error" in str(right.head.render()))
        assert "[b]reply of a/0 to task 1" in shown(left.transcript), "only the focused side moved"
        await pilot.press("comma")
        await until(pilot, lambda: "[b]reply of b/1 to task 1" in shown(right.transcript))
        assert "(2/3) · reward 0.00" in str(right.head.render())
        await pilot.press("left", "full_stop")
        await until(pilot, lambda: "[b]reply of a/1 to task 1" in shown(left.transcript))
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.screen_stack[0])
        assert app.focused is view
        # a click on a task row opens that task (the first row sits under the header)
        await pilot.click(CompareView, offset=(2, 1))
        screen = await until(pilot, lambda: isinstance(app.screen, SideBySideScreen) and app.screen)
        assert screen.shown_task == (0, "task 0")
        left, right = screen.query(Side)
        await until(pilot, lambda: "reply of a/0 to task 0" in shown(left.transcript) and "reply of b/0 to task 0" in shown(right.transcript))
        assert "task 0" in str(screen.query_one("#task-title", Static).render())


async def test_side_by_side_chooses_which_variants_and_remembers_them() -> None:
    """Three variants ran the task: each side steps through them with v / V (the same
    variant on both sides compares two of its rollouts), `,` `.` choose the rollout,
    and the next task opens with the variants last chosen."""
    store = RolloutStore(clock=lambda: 10.0)
    for name in ("a", "b", "c"):
        scored(store, name, 0, [1.0])
        scored(store, name, 1, [0.0, 1.0])
    engine = StandInEngine(store, {name: StandInVariant(name, store) for name in ("a", "b", "c")})
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        _, screen, left, right = await open_side_by_side(app, pilot, 9, "down", "enter")
        assert (left.variant, right.variant) == ("a", "b")
        assert "variant 2 of 3" in str(right.head.render())
        await pilot.press("right", "v")
        await until(pilot, lambda: "[b]reply of c/0 to task 1" in shown(right.transcript))
        assert right.variant == "c" and "c · variant 3 of 3" in str(right.head.render())
        assert left.variant == "a" and "reply of a/0 to task 1" in shown(left.transcript), "only the focused side changed"
        await pilot.press("full_stop")
        await until(pilot, lambda: "[b]reply of c/1 to task 1" in shown(right.transcript))
        await pilot.press("v")
        await until(pilot, lambda: right.variant == "a" and "[b]reply of a/0 to task 1" in shown(right.transcript))
        await pilot.press("V", "V")
        await until(pilot, lambda: right.variant == "b" and "[b]reply of b/0 to task 1" in shown(right.transcript))
        await pilot.press("v", "escape")
        await until(pilot, lambda: app.screen is app.screen_stack[0])
        await pilot.press("up", "enter")
        screen = await until(pilot, lambda: isinstance(app.screen, SideBySideScreen) and app.screen)
        assert screen.shown_task == (0, "task 0")
        assert [side.variant for side in screen.query(Side)] == ["a", "c"], "the variants last chosen"


async def test_side_by_side_of_a_task_one_variant_ran_shows_two_of_its_rollouts() -> None:
    store = RolloutStore(clock=lambda: 10.0)
    scored(store, "a", 0, [1.0, 0.0])
    scored(store, "b", 1, [1.0])
    engine = StandInEngine(store, {name: StandInVariant(name, store) for name in ("a", "b")})
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        _, screen, left, right = await open_side_by_side(app, pilot, 3, "enter")
        await until(pilot, lambda: "reply of a/0 to task 0" in shown(left.transcript) and "reply of a/1 to task 0" in shown(right.transcript))


async def test_side_by_side_follows_rollouts_that_start_and_end_while_it_is_open() -> None:
    """A rollout of the task that starts while the screen is open joins its variant's
    `,` `.` and the header's count; its reward and ending show as they land; a variant
    whose first rollout of the task starts then joins `v`."""
    store = RolloutStore(clock=lambda: 10.0)
    scored(store, "a", 1, [1.0])
    scored(store, "b", 1, [0.0])
    engine = StandInEngine(store, {name: StandInVariant(name, store) for name in ("a", "b", "c")})
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        _, screen, left, right = await open_side_by_side(app, pilot, 2, "enter")
        assert "b · variant 2 of 2\nrollout #1 (1/1)" in str(right.head.render())
        late = store.add_rollout("b", 1, {"name": "task 1"}, 1)
        store.started(late.key, "r-late", t=5.0)
        message = {"role": "assistant", "content": "[b]the late reply"}
        store.apply_delta(late.key, {"trace": "t-late", "open": {"id": "t-late"}, "nodes": [{"parent": None, "message": message, "sampled": True}]})
        await until(pilot, lambda: "(1/2) · reward 0.00 · done" in str(right.head.render()), "the new rollout counted")
        await pilot.press("right", "full_stop")
        await until(pilot, lambda: "[b]the late reply" in shown(right.transcript), "the new rollout shown")
        assert "rollout #2 (2/2) · reward – ·" in str(right.head.render())
        store.apply_delta(late.key, {"trace": "t-late", "set": {"rewards": {"r": {"score": 1.0, "weight": 1.0}}}})
        store.finished(late.key, {"traces": [dict(late.assembly.traces["t-late"])]}, t=8.0)
        await until(pilot, lambda: "(2/2) · reward 1.00 · done" in str(right.head.render()), "its reward and ending")
        scored(store, "c", 1, [0.5])
        await until(pilot, lambda: "variant 2 of 3" in str(right.head.render()), "the new variant counted")
        await pilot.press("v")
        await until(pilot, lambda: right.variant == "c" and "[b]reply of c/0 to task 1" in shown(right.transcript))
        assert "c · variant 3 of 3\nrollout #1 (1/1) · reward 0.50 · done" in str(right.head.render())


def view_text(view: CompareView) -> str:
    return "\n".join(strip.text for strip in view.render_lines(view.size.region))


async def test_the_compare_tab_computes_only_when_the_store_moved_and_it_shows(monkeypatch) -> None:
    """An ending shows on the tab without waiting for a clock; ticks with nothing new,
    or with the tab hidden, compute nothing (at 5,000 rollouts a comparison takes tens
    of milliseconds)."""
    computed: list[int] = []
    real = compare_view.compare_store
    monkeypatch.setattr(compare_view, "compare_store", lambda store: computed.append(store.version) or real(store))
    store = RolloutStore()  # the real clock: the app's once-a-second work runs
    scored(store, "a", 0, [1.0])
    scored(store, "b", 0, [0.0])
    app = TracewatchApp(StandInEngine(store, {name: StandInVariant(name, store) for name in ("a", "b")}))

    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 2)
        await pilot.press("4")
        view = app.query_one(CompareView)
        await until(pilot, lambda: "b  mean reward 0.000 over 1 scored" in view_text(view), "the tab drawn")
        before = len(computed)
        await more_ticks(app, pilot, 40, "the app ticking with nothing moved")
        assert len(computed) == before, "nothing moved: nothing computed"
        scored(store, "b", 0, [1.0])
        await until(pilot, lambda: "b  mean reward 0.500 ± 0.500 over 2 scored" in view_text(view), "the new reward shown")
        await pilot.press("1")
        before = len(computed)
        scored(store, "a", 0, [0.0])
        await more_ticks(app, pilot, 40, "the app ticking with the tab hidden")
        assert len(computed) == before, "the tab is hidden: nothing computed"
        await pilot.press("4")
        await until(pilot, lambda: "a  mean reward 0.500 ± 0.500 over 2 scored" in view_text(view), "what landed while it was hidden")
        assert computed[before:] == [store.version], "computed once, for the store as it is"


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
async def test_the_compare_tab_fits_its_pane_and_shows_every_count(size: tuple[int, int]) -> None:
    """In a narrow pane (80x24, or beside the table at 200x60) the task column gives
    way: every variant's numbers and its failed and cancelled counts stay whole."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        await pilot.press("4")
        view = app.query_one(CompareView)
        await until(pilot, lambda: view.region.height > 3)
        lines = [strip.text for strip in view.render_lines(view.size.region)]
        head = lines[0]
        assert head.split() == ["task", "baseline", "fail", "cxl", "candidate", "fail", "cxl"], head
        assert len(head.rstrip()) <= view.size.width
        fail_at = [i + len("fail") - 1 for i in range(len(head)) if head.startswith("fail", i)]
        cxl_at = [i + len("cxl") - 1 for i in range(len(head)) if head.startswith("cxl", i)]
        scored = [line for line in lines[1:8] if "1.00 (1/1) 3t" in line]
        assert scored and all(line.count(" 3t ") == 2 for line in scored), "both variants' cells whole"
        unscored = [line for line in lines[1:8] if line.count("–") == 2]
        assert [[line[at] for at in fail_at] for line in unscored] == [["1", "1"], [" ", " "]], unscored
        assert [[line[at] for at in cxl_at] for line in unscored] == [[" ", " "], ["1", "1"]], unscored


def _columns_of(line: str) -> list[int]:
    """Where each of a line's cells puts the end of its passes `(1/2)` and of its turns `3t`."""
    return [match.end() for match in re.finditer(r"\(\d+/\d+\)|\b\d+t\b", line)]


async def test_compare_columns_stay_aligned_whatever_a_cell_holds() -> None:
    """A cell with retried errors (`1.00 (1/1) 3t 7.0s 1!`) lines up with one without:
    each part of a cell in one column, in the Compare tab and in `tracewatch compare`."""
    engine = make_engine()
    comparison = compare_store(engine.store)
    assert any(cell.errors for cells in comparison.tasks.values() for cell in cells.values()), "the fixture has a retried error"
    rows = [line for line in compare_lines(comparison)[2:] if "(" in line]
    assert len({tuple(_columns_of(line)) for line in rows}) == 1, "\n".join(rows)
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        await pilot.press("4")
        view = app.query_one(CompareView)
        await until(pilot, lambda: view.region.height > 3)
        console = Console(width=view.content_region.width, record=True, color_system=None)
        console.print(view.render())
        shown = [line for line in console.export_text().splitlines() if "(" in line and "/" in line and "variants" not in line and "each cell" not in line]
        assert len(shown) == sum(any(cell.k for cell in cells.values()) for cells in comparison.tasks.values())
        assert len({tuple(_columns_of(line)) for line in shown}) == 1, "\n".join(shown)


def painted_outcomes(transcript: Transcript) -> list[tuple[str | None, str]]:
    """From now on, each outcome line `transcript` paints, with the rollout it shows."""
    painted: list[tuple[str | None, str]] = []
    render_line = transcript.render_line

    def spy(y: int):
        strip = render_line(y)
        if "outcome" in strip.text:
            painted.append((transcript.rollout_key, strip.text.rstrip("━ ")))
        return strip

    transcript.render_line = spy  # type: ignore[method-assign]
    return painted


def multi_agent(store: RolloutStore, variant: str, rewards: list[tuple[float, float]]) -> None:
    """Rollouts of task 0 whose episodes have two scored traces each (a solver and a
    judge, with these rewards): each trace's outcome says the rollout's mean too."""
    for index, pair in enumerate(rewards):
        rollout = store.add_rollout(variant, 0, {"name": "task 0"}, index)
        store.started(rollout.key, f"r-{rollout.key}", t=0.0)
        for agent, reward in zip(("solver", "judge"), pair):
            trace = f"{agent}-{rollout.key}"
            store.apply_delta(rollout.key, {"trace": trace, "open": {"id": trace}, "set": {"rewards": {"r": {"score": reward, "weight": 1.0}}}}, t=0.0)
            message = {"role": "assistant", "content": f"{agent} of {rollout.key}"}
            store.apply_delta(rollout.key, {"trace": trace, "nodes": [{"parent": None, "message": message, "sampled": True}]})
        store.finished(rollout.key, {"traces": [dict(t) for t in rollout.assembly.traces.values()]}, t=2.0)


async def test_switching_rollouts_draws_nothing_of_the_old_trace_with_the_new_rollouts_reward() -> None:
    """In the trace pane and on a side by side's side, a switch to another rollout draws
    its trace and only it, and every outcome painted is the shown rollout's own. The
    new rollout's reward was set before its trace: the old trace's outcome was drawn
    again with the new rollout's mean on the way."""
    store = RolloutStore(clock=lambda: 10.0)
    multi_agent(store, "a", [(1.0, 0.0), (0.0, 0.0)])
    multi_agent(store, "b", [(1.0, 1.0)])
    engine = StandInEngine(store, {name: StandInVariant(name, store) for name in ("a", "b")})
    own = {"a/0": "rollout reward 0.50", "a/1": "rollout reward 0.00"}
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 3)
        app.table.focus()
        transcript = app.trace_pane.transcript
        await until(pilot, lambda: transcript.rollout_key == "a/0" and own["a/0"] in shown(transcript))
        painted, drawn = painted_outcomes(transcript), transcript.blocks_rendered
        await pilot.press("down")
        await until(pilot, lambda: transcript.rollout_key == "a/1" and own["a/1"] in shown(transcript))
        assert transcript.blocks_rendered - drawn == len(transcript._blocks), "the new trace's blocks and no other"
        assert painted and all(own[key] in text for key, text in painted), painted
        _, screen, left, right = await open_side_by_side(app, pilot, 3, "enter")
        await until(pilot, lambda: left.transcript.rollout_key == "a/0" and own["a/0"] in shown(left.transcript))
        painted, drawn = painted_outcomes(left.transcript), left.transcript.blocks_rendered
        await pilot.press("full_stop")
        await until(pilot, lambda: left.transcript.rollout_key == "a/1" and own["a/1"] in shown(left.transcript))
        assert left.transcript.blocks_rendered - drawn == len(left.transcript._blocks), "the new trace's blocks and no other"
        assert painted and all(own[key] in text for key, text in painted), painted


async def test_a_long_task_name_takes_the_width_there_is() -> None:
    """At 160 columns a 60-character task name is whole: the task column takes what
    the numbers leave, not a fixed 32 cells with 70 blank beside them."""
    store = RolloutStore()
    label = "repository: fix the flaky retry in the HTTP client pool · "
    for name in ("baseline", "candidate"):
        feed(store, name, label=label)
    engine = StandInEngine(store, {name: StandInVariant(name, store) for name in ("baseline", "candidate")})
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        await pilot.press("4")
        view = app.query_one(CompareView)
        whole = f"{label}calc (120 + 37) * 3"
        await until(pilot, lambda: whole in screen_text(app), f"{whole!r} whole on the Compare tab")
        assert view.region.width < 160


@pytest.mark.parametrize("size, hint", [((80, 24), "d differ"), ((200, 40), "d: where they differ")])
async def test_the_side_by_side_title_keeps_its_keys_whole(size: tuple[int, int], hint: str) -> None:
    """At 80 columns the keys' hint lost its last letters past the edge; the longest
    hint that fits is shown whole and the task's name gives way."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=size) as pilot:
        _, screen, _, _ = await open_side_by_side(app, pilot, 14, "enter")
        title = screen.query_one("#task-title", Static)
        await until(pilot, lambda: str(title.render()).endswith(hint), f"a title ending in {hint!r}")
        text = str(title.render())
        assert text.startswith("task calc") and len(text) <= size[0] - 2, text


def test_a_count_of_none_on_the_cursor_row_is_not_painted_as_a_block() -> None:
    """The cursor's row is drawn reversed: a blank fail or cxl cell styled in its
    count's colour showed as a red or orange block, read as failures the task does not
    have."""
    store = RolloutStore()
    scored(store, "a", 0, [1.0])
    scored(store, "a", 1, [None])
    comparison = compare_store(store)
    palette: Any = SimpleNamespace(success=Style(color="green"), error=Style(color="red"), warning=Style(color="yellow"), muted=Style(dim=True))
    console = Console(width=120, color_system="truecolor")
    lines = list(Segment.split_lines(console.render(compare_view.comparison_table(comparison, palette, cursor=(0, "task 0"), width=120))))
    cursor_row = next(line for line in lines if "task 0" in "".join(s.text for s in line))
    painted = [s for s in cursor_row if not s.text.strip() and s.style is not None and s.style.reverse and s.style.color is not None and s.style.color.name in ("red", "yellow")]
    assert painted == [], f"blank cells painted on the cursor's row: {painted}"
    failing_row = next(line for line in lines if "task 1" in "".join(s.text for s in line))
    assert any(s.text.strip() == "1" and s.style is not None and s.style.color is not None and s.style.color.name == "red" for s in failing_row)
