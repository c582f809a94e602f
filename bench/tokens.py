"""How the token view scales with a 32k-token message.

Inside a headless Textual app, against a baseline measured in the same run: the same
view of a 100-token message (what opening any message costs, whatever its length).
- open: from pushing the view to the compositor drawing its first line of the message
  (the screen mounted, the message read from its packed arrays, decoded per distinct
  id, its first screens laid out, coloured),
  with the tokenizer's cache cold and warm; and the core steps of a cold open alone,
  the whole message laid out;
- a colouring change (one numpy pass and a repaint);
- a keystroke that moves the cursor a page down, then renders what is on screen.

Run: python -m bench.tokens
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable

from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.strip import Strip
from textual.widgets import Static

from tracewatch.core.demo import TOKENIZER
from tracewatch.core.demo.content import PROBLEMS
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.trace_state import TraceState
from tracewatch.core.tokens.streams import read_message
from tracewatch.core.tokens.tokenizer import TokenText
from tracewatch.tui.tokens.token_layout import lay_out
from tracewatch.tui.tokens.token_lines import TokenLines
from tracewatch.tui.tokens.token_view import TokenScreen

LONG = 32_768
SHORT = 100
SIZE = (120, 40)
REPEATS = 7


def corpus_ids(text: TokenText, count: int) -> list[int]:
    """`count` token ids of the demo's own text, repeated as needed."""
    ids: list[int] = []
    problems = [problem for problems in PROBLEMS.values() for problem in problems]
    seed = 0
    while len(ids) < count:
        for problem in problems:
            for step in problem.script(random.Random(seed)):
                ids += text.encode(step.text + "\n" + "".join(run.output for run in step.runs))
        seed += 1
    return ids[:count]


def trace_with(ids: list[int], key: str) -> TraceState:
    """One sampled node of `ids` with every stream, fed through the store as a live
    stream would (its arrays arrive packed)."""
    from tracewatch.core.wire.protocol import pack, unpack_delta

    rng = random.Random(7)
    trained = len(ids) - 3
    logprobs = [-rng.expovariate(10.0) for _ in range(trained)]
    node = {
        "parent": None, "sampled": True, "message": {"role": "assistant", "content": "..."},
        "token_ids": ids, "mask": [False] * 3 + [True] * trained, "is_content": [True] * len(ids),
        "logprobs": logprobs, "advantages": [0.5] * trained,
        "trainer_logprobs": [value + rng.gauss(0, 0.01) for value in logprobs],
        "entropies": [rng.random() for _ in range(trained)],
        "loss_weights": {"policy": [1.0] * len(ids)},
    }
    store = RolloutStore()
    store.add_rollout("v", 0, {}, key=key)
    store.started(key, "req", t=0.0)
    store.apply_delta(key, {"trace": "t", "open": {"version": 1, "id": "t"}})
    store.apply_delta(key, unpack_delta(pack({"trace": "t", "nodes": [node]})))
    return store.rollouts[key].traces["t"]


async def until(pilot: Pilot, condition: Callable[[], object]) -> None:
    while not condition():
        await pilot.pause()


async def timed(action: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """Wall time and this process's CPU time: on a shared, loaded machine the second
    says what the work costs, the first what a user waited."""
    wall, cpu = time.perf_counter(), time.process_time()
    await action()
    return time.perf_counter() - wall, time.process_time() - cpu


def paint(screen: TokenScreen) -> None:
    """What the compositor asks for: every line on screen."""
    for y in range(screen.lines.size.height):
        screen.lines.render_line(y)


class TimedLines(TokenLines):
    """Notes when the compositor first draws a line of the message: the rest of a long
    message is laid out after that, a chunk a turn, while the user already reads."""

    opened: tuple[float, float] | None = None

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        if self.opened is None and self.placed is not None:
            self.opened = (time.perf_counter(), time.process_time())
        return strip


class TimedScreen(TokenScreen):
    def compose(self) -> ComposeResult:
        yield Static(id="tokens-head", markup=False)
        yield TimedLines(id="tokens-body")
        yield Static(id="tokens-at", markup=False)

    @property
    def opened(self) -> tuple[float, float] | None:
        return self.query_one(TimedLines).opened if self.is_mounted else None


async def measure(pilot: Pilot, trace: TraceState, fresh_text: Callable[[], TokenText]) -> dict[str, tuple[float, float]]:
    app = pilot.app
    results: dict[str, list[tuple[float, float]]] = {"open cold": [], "open warm": [], "colour": [], "page down": []}
    for _ in range(REPEATS):
        for label, text in (("open cold", fresh_text()), ("open warm", warm_text)):
            screen = TimedScreen(trace, 0, text, "bench", "bench")
            wall, cpu = time.perf_counter(), time.process_time()
            await app.push_screen(screen)
            await until(pilot, lambda screen=screen: screen.opened is not None)
            assert screen.opened is not None
            results[label].append((screen.opened[0] - wall, screen.opened[1] - cpu))
            if label == "open warm":
                await until(pilot, lambda screen=screen: screen.lines.placed is not None and screen.lines.placed.done)

                async def colour(screen: TokenScreen = screen) -> None:
                    screen.action_colour(1)
                    await pilot.pause()
                    paint(screen)

                async def page(screen: TokenScreen = screen) -> None:
                    await pilot.press("pagedown")
                    paint(screen)

                results["colour"].append(await timed(colour))
                results["page down"].append(await timed(page))
            app.pop_screen()
            await pilot.pause()
    return {label: (median(times, 0), median(times, 1)) for label, times in results.items()}


def median(times: list[tuple[float, float]], which: int) -> float:
    return statistics.median(sample[which] for sample in times)


warm_text = TokenText.load(str(TOKENIZER))


def core_steps(trace: TraceState) -> dict[str, float]:
    """A cold open's steps alone: read the packed node, decode per id, lay out."""
    times: dict[str, list[float]] = {"read": [], "decode": [], "lay out": []}
    for _ in range(REPEATS):
        text = TokenText.load(str(TOKENIZER))
        started = time.process_time()
        tokens = read_message(trace.nodes[0])
        read = time.process_time()
        pieces = text.pieces(tokens.ids.tolist())
        decoded = time.process_time()
        lay_out(pieces, SIZE[0] - 2)
        laid = time.process_time()
        times["read"].append(read - started)
        times["decode"].append(decoded - read)
        times["lay out"].append(laid - decoded)
    return {label: statistics.median(values) for label, values in times.items()}


async def main() -> None:
    ids = corpus_ids(warm_text, LONG)
    long_trace, short_trace = trace_with(ids, "long"), trace_with(ids[:SHORT], "short")
    app: App[None] = App()
    async with app.run_test(size=SIZE) as pilot:
        short = await measure(pilot, short_trace, lambda: TokenText.load(str(TOKENIZER)))
        long = await measure(pilot, long_trace, lambda: TokenText.load(str(TOKENIZER)))
    print(f"token view, {LONG:,}-token message vs {SHORT}-token baseline (median of {REPEATS}, {SIZE[0]}x{SIZE[1]}; wall / CPU):")
    for label, ((wall, cpu), (base_wall, base_cpu)) in ((label, (long[label], short[label])) for label in long):
        print(f"  {label:<10} {wall * 1000:7.1f} / {cpu * 1000:6.1f} ms   baseline {base_wall * 1000:6.1f} / {base_cpu * 1000:6.1f} ms"
              f"   x{wall / base_wall:.1f} / x{cpu / base_cpu:.1f}")
    print(f"a cold open's core steps for {LONG:,} tokens ({len(set(ids)):,} distinct ids), CPU:")
    for label, seconds in core_steps(long_trace).items():
        print(f"  {label:<10} {seconds * 1000:8.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
