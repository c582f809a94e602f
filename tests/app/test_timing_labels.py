"""The Timing tab's numbers are never cut at the pane's edge: the bars give way."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

from tests.support.app_screen import screen_text, select
from tests.support.polling import until
from tests.support.tui_standin import make_engine
from tracewatch.core.run.durations import span_text
from tracewatch.core.wire.protocol import AGENT_PARTS, PHASES
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views.timing_view import LABEL_WIDTH, waterfall

hostile_seconds = st.one_of(st.floats(), st.sampled_from([1e308, -1e308, 1.257086519e9, 0.0, 5e-324]), st.integers(-(2**70), 2**70).map(float))
"""What a run folder's timing can hold: huge, tiny, negative, infinite, NaN."""


@pytest.mark.parametrize("size", [(200, 50), (80, 24)])
async def test_every_phase_line_shows_its_numbers_whole(size: tuple[int, int]) -> None:
    app = TracewatchApp(make_engine(copies=3))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.table.row_count == 42)
        await select(pilot, "baseline/run1/0")
        await pilot.press("2")
        await until(pilot, lambda: "p50 / p95 per variant" in screen_text(app) or app.timing.region.height > 3)
        await pilot.pause()
        text = screen_text(app)
        rollout = app.store.rollouts["baseline/run1/0"]
        width = app.timing.size.width
        lines = app.timing.render().renderables[1].plain.splitlines()
        assert all(len(line) <= width for line in lines), f"a line is wider than the pane ({width}): {lines}"
        if width < 100:  # narrow panes put each phase's p50/p95 after its bar
            for phase, (p50, p95) in app.store.stats(rollout.variant).phases.items():
                if phase in {"agent", "setup", "scoring"} and f"\\n{phase}" in "\\n" + "\\n".join(lines):
                    assert f"p50/p95 {span_text(p50)}/{span_text(p95)}" in text, phase


def _timing(durations: list[float], open_: bool) -> dict:
    """A trace's timing with its phases end to end, taking `durations` (the last one
    still open with `open_`), the agent's split between model and harness."""
    timing: dict = {"start": 1000.0}
    at = 1000.0
    for phase, seconds in zip(PHASES, durations):
        timing[phase] = {"start": at, "end": at + seconds}
        at += seconds
    if open_:
        timing[PHASES[len(durations) - 1]]["end"] = None
    if "agent" in timing:
        seconds = timing["agent"]["end"] - timing["agent"]["start"] if timing["agent"]["end"] else 1.0
        timing["agent"] |= {AGENT_PARTS[0]: {"duration": seconds * 0.3}, AGENT_PARTS[1]: {"duration": seconds * 0.7}}
    return timing


async def test_the_waterfall_fits_any_width_with_any_numbers() -> None:
    """Wide numbers (`783ms/830ms`, `14.1s/1234.5s`, an open span's `…`) in panes from 30
    to 120 columns: every line fits, its numbers whole; a pane too narrow for p50/p95
    leaves it out rather than cutting it. And any numbers a source sends: a trace whose
    phases took no time but whose model and harness each took 1,257,086,519 s drew a bar
    of 10^17 cells (MemoryError: the loaded suite hung on it), 1e308 s crashed the
    durations' text; every bar stays within the pane."""
    app = TracewatchApp(make_engine())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.table.row_count == 14)
        palette = app.palette

        @settings(max_examples=150, deadline=None)
        @given(
            durations=st.lists(st.floats(0.0004, 5000.0), min_size=1, max_size=len(PHASES)),
            typical=st.tuples(st.floats(0.0004, 5000.0), st.floats(0.0004, 5000.0)),
            width=st.integers(30, 120),
            open_=st.booleans(),
        )
        def check(durations: list[float], typical: tuple[float, float], width: int, open_: bool) -> None:
            timing = _timing(durations, open_)
            typicals = {phase: typical for phase in (*PHASES, *AGENT_PARTS)}
            text = waterfall(timing, 1000.0 + sum(durations) + 1, width, palette, typicals)
            lines = text.plain.splitlines()
            assert all(cell_len(line) <= width for line in lines), (width, lines)
            shown = f"p50/p95 {span_text(typical[0])}/{span_text(typical[1])}"
            durations_shown = [line for line in lines[:-1] if "p50/p95" not in line]
            assert all(line.endswith(shown) for line in lines[:-1] if line not in durations_shown), lines
            assert width < 50 or not durations_shown, "p50/p95 left out only where it cannot fit"

        check()

        @settings(max_examples=200, deadline=None)
        @given(
            stamps=st.lists(hostile_seconds, min_size=len(PHASES) * 2 + 1, max_size=len(PHASES) * 2 + 1),
            parts=st.tuples(hostile_seconds, hostile_seconds),
            width=st.integers(30, 120),
        )
        def hostile(stamps: list[float], parts: tuple[float, float], width: int) -> None:
            timing: dict = {"start": stamps[0]}
            for n, phase in enumerate(PHASES):
                timing[phase] = {"start": stamps[1 + 2 * n], "end": stamps[2 + 2 * n]}
            timing["agent"] |= {part: {"duration": seconds} for part, seconds in zip(AGENT_PARTS, parts, strict=True)}
            lines = waterfall(timing, 2e9, width, palette).plain.splitlines()
            assert all(len(line) - len(line[LABEL_WIDTH:].lstrip(" █▒")) <= width for line in lines[:-1]), lines

        hostile()
