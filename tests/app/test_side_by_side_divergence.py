"""Where two traces of a task part ways, side by side: the first difference named under
the title, each differing turn marked on both sides, `d` bringing both to it, and a
turn that lands on either side judged as it lands."""

from __future__ import annotations

from typing import Any

from tests.support.app_screen import open_side_by_side, told
from tests.support.diverging_traces import Scripted, diverged, step
from tests.support.polling import until
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views.side_by_side import Side
from tracewatch.tui.trace.transcript import Transcript


def lines(transcript: Transcript) -> list[str]:
    return transcript.plain_lines()


def callout(screen: Any) -> str:
    return str(screen.divergence.render())


def top(side: Side) -> str:
    return side.transcript.render_line(0).text


async def test_the_first_difference_is_named_marked_on_both_sides_and_d_brings_both_there() -> None:
    """Twenty turns each, alike but for turn 3's arguments and turn 6's tool: the title's
    line names turn 3, both sides mark 3 and 6 and only those, and `d` puts turn 3's
    rule at the top of both sides, then turn 6's."""
    app = TracewatchApp(diverged().engine)
    async with app.run_test(size=(160, 40)) as pilot:
        _, screen, left, right = await open_side_by_side(app, pilot, 2, "enter")
        await until(pilot, lambda: callout(screen).startswith("first difference: turn 3 · tool arguments · 1 more differing turn"))
        assert "turn 3" not in top(left) and "turn 3" not in top(right), "both follow the end before the key"
        await pilot.press("d")  # turn 3 is not laid out yet: the newest turns are
        await until(pilot, lambda: top(left).startswith("≠ ── turn 3 · first difference · tool arguments") and top(right).startswith("≠ ── turn 3 · first difference · tool arguments"))
        await pilot.press("d")
        await until(pilot, lambda: top(left).startswith("≠ ── turn 6 · tool call") and top(right).startswith("≠ ── turn 6 · tool call"))
        await pilot.press("d")
        await until(pilot, lambda: top(left).startswith("≠ ── turn 3") and top(right).startswith("≠ ── turn 3"), "again from the first")
        for side in (left, right):
            marked = [line.strip() for line in lines(side.transcript) if line.startswith("≠")]
            assert [line.rstrip("─ ") for line in marked] == ["≠ ── turn 3 · first difference · tool arguments", "≠ ── turn 6 · tool call"], marked
        assert "line 3: [b]text[/b] of the file" in "\n".join(lines(left.transcript)), "trace text drawn literally"


async def test_a_turn_that_lands_on_either_side_is_judged_as_it_lands() -> None:
    """The left has ended after four turns; the right streams while the screen is
    open. Alike so far, then its third turn calls another tool, then it ends a turn
    short: each shows on both sides as it lands."""
    scripted = Scripted()
    for turn in range(1, 5):
        scripted.send("a", step(turn))
    scripted.finish("a")
    for turn in range(1, 3):
        scripted.send("b", step(turn))
    app = TracewatchApp(scripted.engine)
    async with app.run_test(size=(160, 40)) as pilot:
        _, screen, left, right = await open_side_by_side(app, pilot, 2, "enter")
        said = lambda: f"the callout, which reads {callout(screen)!r}"  # noqa: E731
        await until(pilot, lambda: callout(screen) == "alike so far: 2 turns compared, the rest as they land", said)
        given = told(app)
        await pilot.press("d")
        await until(pilot, lambda: "no difference so far" in given, lambda: f"d to tell 'no difference so far'; told {given}")
        scripted.send("b", step(3)[:1])
        await until(pilot, lambda: "result 2" in "\n".join(lines(right.transcript)), "the half turn shown")
        assert callout(screen).startswith("alike so far: 2 turns"), "a turn without its reply is not judged"
        scripted.send("b", step(3, tool="grep")[1:])
        await until(pilot, lambda: callout(screen).startswith("first difference: turn 3 · tool call"), said)
        for side in (left, right):
            assert any(line.startswith("≠ ── turn 3 · first difference · tool call") for line in lines(side.transcript))
        scripted.finish("b")
        await until(pilot, lambda: "1 more differing turn" in callout(screen), said)
        assert any(line.startswith("≠ ── turn 4 · one side only") for line in lines(left.transcript))
        assert not any("turn 4" in line for line in lines(right.transcript))


async def test_a_side_moved_to_a_rollout_with_no_trace_leaves_no_marks_behind() -> None:
    """The marks belong to the pair compared: once one side shows a rollout that has not
    begun, neither side keeps the last pair's ≠ marks."""
    scripted = diverged()
    scripted.store.add_rollout("a", 0, {"name": "the bug"}, 1)  # a second rollout of the task, not begun
    app = TracewatchApp(scripted.engine)
    async with app.run_test(size=(160, 40)) as pilot:
        _, screen, left, right = await open_side_by_side(app, pilot, 3, "enter")
        await until(pilot, lambda: callout(screen).startswith("first difference: turn 3"))
        assert any(line.startswith("≠") for line in lines(right.transcript))
        await pilot.press("full_stop")
        await until(pilot, lambda: callout(screen) == "nothing to compare yet: a side has no trace")
        for side in (left, right):
            await until(pilot, lambda side=side: not any(line.startswith("≠") for line in lines(side.transcript)), "no mark left")
