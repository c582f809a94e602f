"""Regenerate the README screenshots from the real app on the real built-in demo.

    python screenshots/make.py [--speed 2] [--no-png]

Starts `LiveSession(demo_config(sys.executable, speed))` (two supervised demo env servers)
with a fresh TRACEWATCH_HOME in a temporary directory, drives `TracewatchApp` with
`App.run_test(size=(200, 60))` and pilot key presses, and saves an SVG at each moment
worth showing (each waited for with a deadline), then a PNG of each SVG:

    main.svg            the main screen mid-run: variant cards, the rollouts table, a trace
    main-80x24.svg      the same screen in an 80x24 terminal
    trace-pending.svg   a trace whose pending preview (sent to the model, no reply yet) shows
    timing.svg          a finished rollout's phase waterfall and per-variant p50/p95
    compare.svg         the variants task by task: mean ± standard error, where they differ
    side-by-side.svg    a task's traces side by side, one variant's rollout on each side,
                        both at the first turn where they differ (marked ≠ with how)
    timeline.svg        every rollout on one time axis by phase, each variant's concurrency above
    trends.svg          each variant's finished per minute, reward, errors, tokens/s, agent time
    tokens.svg          a training rollout's message token by token, coloured by where the
                        trainer disagrees with the sampler, the cursor on the worst token
    cancel-variant.svg  a variant cancel escalating: runs cancelled, SIGTERM sent, grace left
    prime-rl.svg        `tracewatch open` on a prime-rl output directory being written live:
                        in-flight rows and finished ones, an in-flight trace selected
    prime-rl-metrics.svg  the same run's own metrics by step and its eval plan (Trends tab)

For the last one the candidate's demo server is first frozen with SIGSTOP: a wedged
server that ignores SIGTERM, the case the grace period exists for (a healthy demo
server exits within a blink of SIGTERM, too fast to photograph). The app itself is not
told; the supervisor SIGKILLs the frozen server when its grace runs out.

At the end the engine is shut down (every run cancelled, every server stopped) and
the script checks that no process it started is left.

The prime-rl one has no demo server: the test suite's `RunWriter`
(tests/support/prime_rl_orchestrator.py) plays prime-rl's orchestrator and trainer on a
thread, writing a run's output directory as prime-rl's file monitor does, and the app
follows it as `tracewatch open OUT` does (`open_folder(OUT, follow=True)`); the script
waits for the writer to finish before it ends.

PNGs need CairoSVG (`pip install cairosvg`, which needs the cairo C library:
`apt-get install libcairo2`) or else `rsvg-convert` (`apt-get install librsvg2-bin`);
text is drawn in DejaVu Sans Mono (`apt-get install fonts-dejavu-core`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # runnable from a checkout as `python screenshots/make.py`
    sys.path.insert(0, str(ROOT))

from tracewatch.core.demo.builtin_config import demo_config  # noqa: E402
from tracewatch.core.engine.live import LiveSession  # noqa: E402
from tracewatch.core.session.compare import compare_store  # noqa: E402
from tracewatch.core.session.contracts import VariantState  # noqa: E402
from tracewatch.core.session.rollout import Rollout  # noqa: E402
from tracewatch.core.session.status import Status  # noqa: E402
from tracewatch.core.supervision.supervisor import process_alive  # noqa: E402

SIZE = (200, 60)
SMALL = (80, 24)
PNG_FONT = "DejaVu Sans Mono"
"""The SVGs name Fira Code (fetched from a CDN by browsers); offline renderers get this."""


class Timeout(RuntimeError):
    pass


async def wait_for(pilot, what: str, condition: Callable[[], object], timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise Timeout(f"timed out after {timeout:.0f}s waiting for {what}")
        await pilot.pause(0.05)
    return result


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


class Shooter:
    def __init__(self, app, pilot, out: Path) -> None:
        self.app, self.pilot, self.out = app, pilot, out
        self.written: list[Path] = []

    async def settle(self, seconds: float = 0.4) -> None:
        """Let the ticks redraw what changed (rows at 10 Hz, clocks once a second)."""
        await self.pilot.pause(seconds)

    def shoot(self, name: str, title: str) -> None:
        path = self.out / f"{name}.svg"
        path.write_text(self.app.export_screenshot(title=title), encoding="utf-8")
        self.written.append(path)
        say(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")

    async def select(self, key: str) -> None:
        """Move the table's cursor to a rollout with the arrow keys."""
        app, table = self.app, self.app.table
        if app.focused is not table:
            table.focus()
            await self.pilot.pause()
        for _ in range(3):
            step = table.get_row_index(key) - table.cursor_row
            await self.pilot.press(*(["down"] * step if step > 0 else ["up"] * -step))
            if app.selected == key:
                return
        raise Timeout(f"could not select {key}")


    async def side_by_side(self, task: tuple[int, str]) -> None:
        """Move the Compare tab's cursor to the task, open its traces side by side and
        wait for both to be drawn."""
        from tracewatch.tui.run_views.compare_view import CompareView
        from tracewatch.tui.run_views.side_by_side import SideBySideScreen

        app, view = self.app, self.app.query_one(CompareView)
        view.focus()
        for _ in range(3):  # tasks finishing meanwhile may add rows above it
            tasks = list(compare_store(app.store).tasks)
            await self.pilot.press("g", *["down"] * tasks.index(task))
            if view.cursor_task == task:
                break
        else:
            raise Timeout(f"could not move the Compare tab's cursor to {task}")
        await self.pilot.press("enter")
        await wait_for(
            self.pilot, "the task's traces side by side",
            lambda: isinstance(screen := app.screen, SideBySideScreen) and all(side.transcript.rollout_key for side in screen.sides), 10,
        )
        await self.settle(1.1)


    async def to_first_difference(self) -> None:
        """Bring both sides to the first turn where their traces differ, if they do."""
        screen = self.app.screen
        try:
            await wait_for(self.pilot, "the first difference", lambda: "first difference" in str(screen.divergence.render()), 3)
        except Timeout:
            return
        await self.pilot.press("d")
        await self.settle(0.5)


def side_by_side_task(store) -> tuple[int, str]:
    """A task worth showing side by side: one both variants scored whose traces part
    (as the screen opens it: each variant's first rollout of it), where they disagree,
    else where their mean rewards differ, else with the most turns."""
    comparison = compare_store(store)
    both = [task for task, cells in comparison.tasks.items() if all(cells.get(name) and cells[name].k for name in comparison.variants)]
    disagree = set(comparison.disagreements())

    def worth(task: tuple[int, str]) -> tuple[bool, bool, bool, int]:
        cells = comparison.tasks[task].values()
        return parts_ways(store, task), task in disagree, len({cell.mean for cell in cells}) > 1, sum(sum(cell.turns) for cell in cells)

    return max(both, key=worth)


def parts_ways(store, task: tuple[int, str]) -> bool:
    """Whether the first two variants' first rollouts of the task differ at some turn."""
    from tracewatch.core.session.divergence import TurnPairs
    from tracewatch.tui.run_views.side_by_side import task_rollouts

    traces = [store.rollouts[keys[0]].primary for name in store.variants if (keys := task_rollouts(store, name, task))][:2]
    if len(traces) < 2 or None in traces:
        return False
    pairs = TurnPairs(*traces)
    pairs.update(True, True)
    return pairs.first is not None


def by_scenario(engine: LiveSession, variant: str, scenario: str) -> Rollout:
    for key in engine.store.variants[variant]:
        rollout = engine.store.rollouts[key]
        if rollout.task_data.get("scenario") == scenario:
            return rollout
    raise LookupError(f"no {scenario} rollout in {variant}")


def worst_mismatch(trace) -> tuple[int, int] | None:
    """The node and token where the trainer's logprob is furthest from the sampler's."""
    from tracewatch.core.tokens.streams import read_message
    from tracewatch.core.tokens.summary import summarize

    found = [(abs(worst.value), index, worst.index) for index in range(len(trace.nodes))
             if (worst := summarize(read_message(trace.nodes[index])).worst_mismatch) is not None]
    return max(found)[1:] if found else None


def has_pending(rollout: Rollout) -> bool:
    trace = rollout.primary
    return trace is not None and bool(trace.pending) and not rollout.status.finished


def server_pid(variant) -> int | None:
    """The demo server's own pid (the supervisor's child), from the supervisor's record."""
    if variant.stdout_path is None:
        return None
    try:
        record = json.loads((variant.stdout_path.parent / "supervisor.json").read_text())
    except (OSError, ValueError):
        return None
    pid = record.get("child_pid")
    return pid if isinstance(pid, int) else None


async def session(speed: float, out: Path) -> list[Path]:
    from tracewatch.tui.app import TracewatchApp
    from tracewatch.tui.chrome.screens import ConfirmScreen
    from tracewatch.tui.run_views.side_by_side import SideBySideScreen
    from tracewatch.tui.tokens.token_view import TokenScreen

    engine = LiveSession(demo_config(sys.executable, speed=speed))
    app = TracewatchApp(engine)
    store = engine.store
    started: set[int] = set()
    async with app.run_test(size=SIZE) as pilot:
        shots = Shooter(app, pilot, out)
        try:
            await wait_for(
                pilot, "both demo servers to answer health",
                lambda: all(v.state in (VariantState.RUNNING, VariantState.DRAINING) for v in engine.variants.values()), 60,
            )
            for variant in engine.variants.values():
                started |= {pid for pid in (variant.pid, server_pid(variant)) if pid}
            say("both variants running")

            # 1. The main screen mid-run: a mix of phases, one rollout several turns in.
            def mid_run() -> Rollout | None:
                rollouts = list(store.rollouts.values())
                finished = sum(r.status.finished for r in rollouts)
                running = [r for r in rollouts if r.status is Status.RUNNING]
                busy = [r for r in running if r.turns >= 3 and r.variant == "baseline"]
                return max(busy, key=lambda r: r.turns) if finished >= 3 and len(running) >= 5 and busy else None

            rollout = await wait_for(pilot, "a busy mid-run moment", mid_run, 60)
            await shots.select(rollout.key)
            await shots.settle(1.1)
            shots.shoot("main", "tracewatch: the built-in demo, mid-run")

            # The same moment in an 80x24 terminal.
            await pilot.resize_terminal(*SMALL)
            await shots.settle(1.1)
            shots.shoot("main-80x24", "tracewatch in 80x24")
            await pilot.resize_terminal(*SIZE)
            await shots.settle(0.5)

            # 2. A trace with its pending preview: the slow rollout, two turns in,
            #    while the model has not answered.
            slow = by_scenario(engine, "baseline", "slow")
            for _attempt in range(6):
                await wait_for(pilot, "the slow rollout to await a reply", lambda: slow.turns >= 2 and has_pending(slow), 90)
                await shots.select(slow.key)
                await pilot.press("enter")
                await shots.settle(1.1)
                if has_pending(slow):
                    break
            else:
                raise Timeout("the slow rollout's pending preview kept clearing before the screenshot")
            shots.shoot("trace-pending", "tracewatch: a trace awaiting the model's reply")

            # 3. Timing: a finished multi-turn rollout's waterfall, with p50/p95 per variant
            #    once enough rollouts of both variants have finished.
            def timed() -> bool:
                return all(store.stats(name).counts[Status.DONE] >= 5 for name in engine.variants)

            await wait_for(pilot, "five finished rollouts per variant", timed, 120)
            done = [r for r in store.rollouts.values() if r.status is Status.DONE and r.variant == "baseline"]
            rollout = max(done, key=lambda r: (r.turns, r.key))
            await shots.select(rollout.key)
            await pilot.press("2")
            await shots.settle(1.1)
            shots.shoot("timing", "tracewatch: where a rollout's time went")
            await pilot.press("4")
            await shots.settle(1.1)
            shots.shoot("compare", "tracewatch: the variants task by task")

            # A task's traces side by side, opened from the Compare tab: a task where the
            # variants disagree if there is one, else one both scored with the most turns.
            await shots.side_by_side(side_by_side_task(store))
            await shots.to_first_difference()
            shots.shoot("side-by-side", "tracewatch: a task's traces side by side, where they part")
            await pilot.press("escape")
            await wait_for(pilot, "the Compare tab again", lambda: not isinstance(app.screen, SideBySideScreen), 5)

            # The run as a whole: every rollout on one time axis, and the trends.
            await pilot.press("5")
            await shots.settle(1.1)
            shots.shoot("timeline", "tracewatch: every rollout on one time axis")
            await pilot.press("6")
            await shots.settle(1.1)
            shots.shoot("trends", "tracewatch: each variant's trends over the run")
            await pilot.press("1")

            # 4. The training rollout's tokens: the turn where the trainer disagrees with
            #    the sampler most, coloured by that, the cursor on the worst token.
            training = by_scenario(engine, "baseline", "training")
            await wait_for(pilot, "the training rollout to finish", lambda: training.status is Status.DONE, 120)
            await shots.select(training.key)
            await pilot.press("1")
            await shots.settle(0.5)
            await pilot.press("t")
            screen = await wait_for(pilot, "the token view", lambda: isinstance(app.screen, TokenScreen) and app.screen.tokens is not None and app.screen, 10)
            worst = worst_mismatch(screen.trace)
            if worst is None:
                raise RuntimeError("the training rollout has no trainer-sampler mismatch to show")
            node, token = worst
            await pilot.press(*["left_square_bracket"] * (screen.node - node))
            await wait_for(pilot, "the mismatched turn", lambda: screen.node == node, 5)
            while screen.lines.stream is None or screen.lines.stream.key != "mismatch":
                await pilot.press("full_stop")
            screen.lines.move_to(token)
            await shots.settle(0.5)
            shots.shoot("tokens", "tracewatch: a message token by token, coloured by trainer minus sampler logprob")
            await pilot.press("escape")
            await wait_for(pilot, "the main screen again", lambda: not isinstance(app.screen, TokenScreen), 5)

            # 5. Cancel the candidate variant while its server is wedged: the card shows
            #    the escalation and the grace left.
            candidate = engine.variants["candidate"]
            frozen = server_pid(candidate)
            if frozen is None or not candidate.can_cancel:
                raise RuntimeError(f"the candidate variant cannot be cancelled now ({candidate.state})")
            stuck = by_scenario(engine, "candidate", "stuck")
            await shots.select(stuck.key)
            await pilot.press("1")
            os.kill(frozen, signal.SIGSTOP)
            say(f"froze the candidate's demo server (pid {frozen}) with SIGSTOP")
            await pilot.press("x")
            await wait_for(pilot, "the cancel confirmation", lambda: isinstance(app.screen, ConfirmScreen), 5)
            await pilot.press("y")
            await wait_for(
                pilot, "SIGTERM with grace left",
                lambda: (left := candidate.grace_left()) is not None and left < 8.6, 30,
            )
            await shots.settle(0.5)
            shots.shoot("cancel-variant", "tracewatch: cancelling a variant (SIGTERM sent, grace running)")
            await wait_for(pilot, "the candidate to settle", lambda: candidate.state is VariantState.CANCELLED, 30)
            say(f"candidate: {candidate.outcome_text}")
        finally:
            say("shutting the engine down")
            await engine.shutdown()
    left = [pid for pid in started if process_alive(pid)]
    if left:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        raise RuntimeError(f"processes still running after shutdown (now killed): {left}")
    say("every process it started has exited")
    return shots.written


PRIME_RL_RUN = dict(episodes=48, concurrent=8, turns=4, pause=0.12)
"""Long enough to catch rows in flight beside finished ones, short enough to wait out."""


async def prime_rl_session(out: Path) -> list[Path]:
    """`tracewatch open` on a prime-rl output directory while the run writes it."""
    from tests.support.prime_rl_orchestrator import RunWriter, Script
    from tracewatch.core.engine.opened import open_folder
    from tracewatch.core.recordings.prime_rl.layout import StreamRun, detect
    from tracewatch.tui.app import TracewatchApp

    with tempfile.TemporaryDirectory(prefix="tracewatch-prime-rl-") as folder:
        run_dir = Path(folder) / "outputs"
        writer = RunWriter(run_dir, Script(**PRIME_RL_RUN)).start()
        try:
            deadline = time.monotonic() + 30
            while not isinstance(detect(run_dir) if run_dir.is_dir() else None, StreamRun):
                if time.monotonic() > deadline or writer.done.is_set():
                    raise Timeout(f"timed out waiting for the prime-rl writer to lay out {run_dir}")
                await asyncio.sleep(0.05)
            engine = open_folder(run_dir, follow=True)
            app = TracewatchApp(engine)
            store = engine.store
            async with app.run_test(size=SIZE) as pilot:
                shots = Shooter(app, pilot, out)
                try:
                    # rows in flight (one several turns in, selected) beside finished ones
                    def mid_run() -> Rollout | None:
                        rollouts = list(store.rollouts.values())
                        finished = sum(r.status.finished for r in rollouts)
                        running = [r for r in rollouts if r.status is Status.RUNNING]
                        busy = [r for r in running if r.turns >= 2]
                        return max(busy, key=lambda r: r.turns) if finished >= 10 and len(running) >= 4 and busy else None

                    for _attempt in range(6):
                        rollout = await wait_for(pilot, "prime-rl rows in flight beside finished ones", mid_run, 60)
                        await shots.select(rollout.key)
                        await shots.settle(0.6)
                        if rollout.status is Status.RUNNING:
                            break
                    else:
                        raise Timeout("the selected prime-rl rollout kept landing before the screenshot")
                    shots.shoot("prime-rl", "tracewatch open: a prime-rl run followed as it writes")
                    # the run's own metrics (orchestrator, trainer, inference by time) and its eval plan
                    await pilot.press("6")
                    await wait_for(pilot, "the run's metrics charted in the Trends tab", lambda: app.metrics is not None and len(app.metrics.charts) >= 6 and min(len(c.x) for c in app.metrics.charts) >= 4, 60)
                    await shots.settle(0.6)
                    shots.shoot("prime-rl-metrics", "tracewatch open: a prime-rl run's own metrics and eval plan, as they arrive")
                finally:
                    await engine.shutdown()
        finally:  # the writer's thread has no stop: it plays its script out
            if not writer.done.wait(120):
                raise Timeout("timed out after 120s waiting for the prime-rl writer to finish its run")
            writer.join()
    say("the prime-rl writer has finished")
    return shots.written


# -- SVG to PNG ------------------------------------------------------------------------

FONT_FAMILY = re.compile(r"font-family:\s*[^;]+;")


def png_converter() -> tuple[str, Callable[[Path, Path], None]] | None:
    try:
        import cairosvg
    except (ImportError, OSError):
        cairosvg = None
    if cairosvg is not None:
        def convert(svg: Path, png: Path) -> None:
            cairosvg.svg2png(bytestring=_offline_svg(svg).encode(), write_to=str(png))
        return "cairosvg", convert
    if rsvg := shutil.which("rsvg-convert"):
        def convert(svg: Path, png: Path) -> None:
            subprocess.run([rsvg, "--format=png", "--output", str(png)], input=_offline_svg(svg).encode(), check=True)
        return "rsvg-convert", convert
    return None


def _offline_svg(svg: Path) -> str:
    """The SVG with a font an offline renderer has: Textual's SVGs name Fira Code, which
    browsers fetch from a CDN; cairo would fall back to a proportional font."""
    return FONT_FAMILY.sub(f'font-family: "{PNG_FONT}", monospace;', svg.read_text(encoding="utf-8"))


def write_pngs(svgs: list[Path]) -> bool:
    found = png_converter()
    if found is None:
        print(
            "PNGs not written: no SVG converter here. Install one:\n"
            "  pip install cairosvg            (needs the cairo library: apt-get install libcairo2)\n"
            "  or apt-get install librsvg2-bin (rsvg-convert)\n"
            "and a monospace font: apt-get install fonts-dejavu-core",
            file=sys.stderr,
        )
        return False
    name, convert = found
    for svg in svgs:
        png = svg.with_suffix(".png")
        convert(svg, png)
        say(f"wrote {png.relative_to(ROOT) if png.is_relative_to(ROOT) else png} ({name})")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speed", type=float, default=2.0, help="the demo's pace (default 2: twice real time)")
    parser.add_argument("--out", type=Path, default=HERE, help="where to write (default: screenshots/)")
    parser.add_argument("--no-png", action="store_true", help="SVGs only")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)
    with tempfile.TemporaryDirectory(prefix="tracewatch-shots-") as home:
        os.environ["TRACEWATCH_HOME"] = home
        try:
            svgs = asyncio.run(session(args.speed, args.out))
            svgs += asyncio.run(prime_rl_session(args.out))
        except Timeout as error:
            print(f"make.py: {error}; the demo did not reach that moment (try --speed 1)", file=sys.stderr)
            return 1
    if args.no_png:
        return 0
    return 0 if write_pngs(svgs) else 3


if __name__ == "__main__":
    sys.exit(main())
