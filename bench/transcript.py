"""How the transcript scales with a 2,000-turn trace (~20,000 lines).

Times, inside a headless Textual app, against baselines measured in the same run:
- switching to the trace (`show`: its newest nodes, two screens' worth, are laid
  out; the rest as the view scrolls up), and the same followed by Home (every line
  laid out), vs the same content built as one Rich Text and rendered at the widget
  width (what a Static / RichLog of the whole transcript costs);
- appending one turn (`refresh_trace`) vs a full re-render of the transcript (what
  a widget that redraws per delta costs: show and Home);
- `render_line` for a screenful after a scroll jump, every line laid out (cold strip
  cache), vs rendering every line (a view that is not virtualised).

Run: python -m bench.transcript
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable

from rich.console import Console
from rich.text import Text
from textual.app import App, ComposeResult

from tracewatch.core.session.store import RolloutStore
from tracewatch.tui.trace.transcript import Transcript

TURNS = 2000
SIZE = (120, 40)


def build(store: RolloutStore, turns: int) -> tuple[str, str]:
    """A trace of `turns` tool turns, fed through the store as a live stream would."""
    key, trace = "bench", "t"
    store.add_rollout("v", 0, {}, key=key)
    store.started(key, "req", t=0.0)
    store.apply_delta(key, {"trace": trace, "open": {"version": 1, "id": trace}})
    store.apply_delta(key, {"trace": trace, "nodes": [
        {"parent": None, "message": {"role": "system", "content": "You are a coding agent."}, "sampled": False},
        {"parent": 0, "message": {"role": "user", "content": "Fix the failing test."}, "sampled": False},
    ]})
    for _ in range(turns):
        append_turn(store, key, trace)
    return key, trace


def append_turn(store: RolloutStore, key: str, trace: str) -> None:
    n = len(store.rollouts[key].traces[trace].nodes)
    output = "\n".join(f"line {i}: " + "output text " * (i % 12) for i in range(6))
    store.apply_delta(key, {"trace": trace, "nodes": [
        {"parent": n - 1, "sampled": True, "message": {
            "role": "assistant", "content": f"Step {n}: let me run the tests again.",
            "tool_calls": [{"id": f"c{n}", "name": "bash", "arguments": '{"command": "pytest -x -q tests/"}'}]}},
        {"parent": n, "sampled": False, "message": {"role": "tool", "tool_call_id": f"c{n}", "content": output}},
    ], "calls": [{"node": n, "usage": {"prompt_tokens": 900 + n, "completion_tokens": 40},
                  "time": {"start": 1.0, "end": 2.2}, "error": None}]})


def timed(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def as_one_text(widget: Transcript) -> Text:
    """The transcript's plain lines as one Rich Text (the baseline's content)."""
    return Text("\n".join(line.rstrip() for line in widget.plain_lines()))


class BenchApp(App):
    def compose(self) -> ComposeResult:
        yield Transcript()


async def main() -> None:
    store = RolloutStore()
    key, trace_id = build(store, TURNS)
    state = store.rollouts[key].traces[trace_id]
    app = BenchApp()
    async with app.run_test(size=SIZE) as pilot:
        widget = app.query_one(Transcript)
        await pilot.pause()
        width, height = widget.scrollable_content_region.size

        def switch() -> None:
            widget.show(None, None)
            widget.show(key, state)

        def full_render() -> None:
            switch()
            widget.action_scroll_home()

        initial = timed(switch, 5)
        whole = timed(full_render, 5)
        lines = widget.virtual_size.height
        text = as_one_text(widget)
        console = Console(width=width, file=open("/dev/null", "w"), color_system="truecolor")
        one_text = timed(lambda: console.render_lines(text, console.options.update_width(width), pad=False), 3)

        def append_one() -> None:
            append_turn(store, key, trace_id)
            widget.refresh_trace()

        append = timed(append_one, 50)
        full = timed(full_render, 5)

        def screenful_after_jump() -> None:
            widget._cache.clear()
            widget.scroll_to(y=widget.max_scroll_y // 2, animate=False, immediate=True)
            for y in range(height):
                widget.render_line(y)

        screenful = timed(screenful_after_jump, 50)

        every = timed(widget.plain_lines, 3)

    print(f"transcript bench: {TURNS} turns, {lines:,} lines, {width}x{height}")
    rows = [
        ("switch to the trace (show)", initial, "one Rich Text rendered", one_text),
        ("show, then Home (every line)", whole, "one Rich Text rendered", one_text),
        ("append one turn (refresh_trace)", append, "full re-render", full),
        ("screenful after scroll jump", screenful, "render every line", every),
    ]
    for name, ours, base_name, base in rows:
        print(f"  {name:34} {ours * 1e3:9.3f} ms   {base_name:24} {base * 1e3:9.3f} ms   ratio {ours / base:8.4f}")


if __name__ == "__main__":
    asyncio.run(main())
