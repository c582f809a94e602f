"""The live transcript, driven through a real RolloutStore inside a small app."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from textual.app import App, ComposeResult
from textual.pilot import Pilot

from tests.support.polling import until
from tests.support.repo import FIXTURE as RECORDED
from tracewatch.core.session.store import RolloutStore
from tracewatch.core.session.trace_state import TraceState
from tracewatch.tui.trace.transcript import Transcript

FIXTURE = RECORDED / "deltas.jsonl"
SIZE = (100, 30)


class TranscriptApp(App):
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.clock = clock

    def compose(self) -> ComposeResult:
        yield Transcript(clock=self.clock)


def fixture_rows(request: str) -> list[dict]:
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    return [row for row in rows if row["request"] == request]


def new_rollout(store: RolloutStore, key: str = "r") -> str:
    store.add_rollout("v", 0, {}, key=key)
    store.started(key, "req", t=0.0)
    return key


def node(role: str, content: str, parent: int | None, sampled: bool = False, **message) -> dict:
    return {"parent": parent, "message": {"role": role, "content": content, **message}, "sampled": sampled}


def call(index: int | None, error: dict | None = None) -> dict:
    return {
        "node": index,
        "usage": None if error else {"prompt_tokens": 1200, "completion_tokens": 34},
        "time": {"start": 10.0, "end": 11.5},
        "error": error,
    }


@asynccontextmanager
async def showing(trace: Trace) -> AsyncIterator[tuple[TranscriptApp, Pilot, Transcript]]:
    """`trace`'s transcript in a running app."""
    app = TranscriptApp()
    async with app.run_test(size=SIZE) as pilot:
        transcript = app.query_one(Transcript)
        transcript.show(trace.key, trace.state)
        yield app, pilot, transcript


class Trace:
    """A crafted trace fed through the store, one delta at a time."""

    def __init__(self, store: RolloutStore, key: str = "r", trace: str = "t1") -> None:
        self.store, self.key, self.id = store, new_rollout(store, key), trace
        self.nodes = 0
        self.after: Callable[[], None] | None = None
        """Called after each delta (a transcript drawing it as it lands)."""
        store.apply_delta(key, {"trace": trace, "open": {"version": 1, "id": trace}})

    @property
    def state(self) -> TraceState:
        return self.store.rollouts[self.key].traces[self.id]

    def apply(self, **delta) -> None:
        self.store.apply_delta(self.key, {"trace": self.id, **delta})
        if self.after is not None:
            self.after()

    def add(self, *nodes: dict, calls: list[dict] | None = None) -> None:
        self.apply(nodes=list(nodes), **({"calls": calls} if calls else {}))
        self.nodes += len(nodes)

    def turn(self, text: str = "result") -> None:
        """A tool result and the assistant turn answering it, with its call."""
        n = self.nodes
        self.add(
            node("tool", f"{text} {n}\nline two", n - 1 if n else None, tool_call_id=f"c{n}", name="bash"),
            node("assistant", f"answer {n + 1}", n, sampled=True),
            calls=[call(n + 1)],
        )


def screen_lines(widget: Transcript) -> list[str]:
    return [widget.render_line(y).text for y in range(widget.scrollable_content_region.height)]


def all_lines(widget: Transcript) -> list[str]:
    width = widget.scrollable_content_region.width
    return [widget._strip(line, width, False).text for line in widget._lines]


async def test_fixture_turns_appear_in_order_with_call_facts():
    store = RolloutStore()
    key = new_rollout(store, "run0")
    app = TranscriptApp()
    async with app.run_test(size=SIZE) as pilot:
        transcript = app.query_one(Transcript)
        for row in fixture_rows("run0"):
            store.apply_delta(key, row["delta"], t=row["t"])
            trace = next(iter(store.rollouts[key].traces.values()))
            transcript.show(key, trace)
        await until(pilot, lambda: transcript.virtual_size.height > 20)
        text = "\n".join(all_lines(transcript))
        order = [text.index(s) for s in ("── turn 1", "system  #0", "user  #1", "assistant  #2", "── turn 2",
                                         "tool  #3 · bash · call_1_0", "assistant  #4", "tool  #5", "The answer is 391.")]
        assert order == sorted(order)
        assert "assistant  #2 · 0.33s · 99 → 15 tok" in text
        assert '⚙ bash  command: echo $((17 * 23))' in text
        assert "pending" not in text


async def test_failed_call_and_trace_errors_are_shown():
    store = RolloutStore()
    app = TranscriptApp()
    async with app.run_test(size=SIZE) as pilot:
        transcript = app.query_one(Transcript)
        for request in ("run4", "error"):
            key = new_rollout(store, request)
            for row in fixture_rows(request):
                store.apply_delta(key, row["delta"], t=row["t"])
            transcript.show(key, next(iter(store.rollouts[key].traces.values())))
            await pilot.pause()
            text = "\n".join(all_lines(transcript))
            if request == "run4":
                assert text.index("✗ model call failed after 0.35s · ProviderError 500") < text.index("system  #0")
                assert "injected HTTP 500 on call 1" in text
            else:
                errors, outcome = text.split("━━ outcome")
                assert errors.rstrip().endswith('"code": 400}}'), "the errors, then the outcome"
                assert outcome.startswith(" · not ok · provider_error")
                assert "✗ trace error · ProviderError 400" in text


async def test_pending_block_shows_then_goes_when_the_turn_commits():
    store = RolloutStore()
    key = new_rollout(store, "run0")
    rows = fixture_rows("run0")
    app = TranscriptApp()
    async with app.run_test(size=SIZE) as pilot:
        transcript = app.query_one(Transcript)
        for row in rows[:3]:  # open, set, pending
            store.apply_delta(key, row["delta"], t=row["t"])
        assert "pending" in rows[2]["delta"]
        transcript.show(key, next(iter(store.rollouts[key].traces.values())))
        await until(pilot, lambda: any("pending · sent to the model" in line for line in screen_lines(transcript)))
        screen = screen_lines(transcript)
        assert screen[0].startswith("┏━ pending · sent to the model, awaiting reply · ")
        assert any(line.startswith("┃ user") for line in screen)
        assert any("Expression: 17 * 23" in line for line in screen)
        assert screen[[i for i, line in enumerate(screen) if line.strip()][-1]].startswith("┗━━")

        store.apply_delta(key, rows[3]["delta"], t=rows[3]["t"])  # the nodes land
        transcript.refresh_trace()
        await pilot.pause()
        text = "\n".join(all_lines(transcript))
        assert "pending" not in text and "assistant  #2" in text

        store.apply_delta(key, rows[4]["delta"], t=rows[4]["t"])  # the next preview: a tool result
        transcript.refresh_trace()
        await pilot.pause()
        tail = all_lines(transcript)[-4:]
        assert tail[0].startswith("┏━ pending") and tail[1].startswith("┃ tool · bash · call_1_0")


def shows_its_end(transcript: Transcript, answer: str) -> None:
    """Following, scrolled to the bottom, `answer` its last message on screen."""
    assert transcript.following
    assert 0 < transcript.max_scroll_y == transcript.scroll_y
    assert screen_lines(transcript)[-2].startswith(f"▎ {answer}")


async def test_follow_keeps_the_bottom_in_view_as_turns_arrive():
    store = RolloutStore()
    trace = Trace(store)
    async with showing(trace) as (app, pilot, transcript):
        for _index in range(12):
            trace.turn()
            transcript.refresh_trace()
            await pilot.pause()
            assert transcript.following and transcript.scroll_y == transcript.max_scroll_y
        shows_its_end(transcript, "answer 23")


async def test_a_following_transcript_made_shorter_still_shows_its_last_line():
    """A strip of cards appearing above it (a replay meets its variants as it plays)
    takes rows from the transcript, not its width: the view stays on the last line."""
    store = RolloutStore()
    trace = Trace(store)
    async with showing(trace) as (app, pilot, transcript):
        for _index in range(12):
            trace.turn()
        transcript.refresh_trace()
        await until(pilot, lambda: 0 < transcript.max_scroll_y == transcript.scroll_y)
        await pilot.resize_terminal(SIZE[0], SIZE[1] - 4)
        await until(pilot, lambda: transcript.scrollable_content_region.height == SIZE[1] - 4)
        await pilot.pause()
        shows_its_end(transcript, "answer 23")


async def test_scrolling_up_stops_following_and_counts_new_messages():
    store = RolloutStore()
    trace = Trace(store)
    for _ in range(10):
        trace.turn()
    async with showing(trace) as (app, pilot, transcript):
        transcript.focus()
        await until(pilot, lambda: transcript.max_scroll_y > 0 and transcript.scroll_y == transcript.max_scroll_y)
        await pilot.press("pageup")
        await until(pilot, lambda: not transcript.following)
        top = transcript.scroll_y
        trace.turn()
        trace.turn()
        transcript.refresh_trace()
        await pilot.pause()
        assert transcript.scroll_y == top
        assert transcript.new_since_left == 4
        last = screen_lines(transcript)[-1]
        assert last.endswith(" +4 new ↓ ")

        width, height = transcript.scrollable_content_region.size
        await pilot.click(transcript, offset=(width - 3, height - 1))
        await until(pilot, lambda: transcript.following and transcript.scroll_y == transcript.max_scroll_y)
        assert transcript.new_since_left == 0
        assert "new ↓" not in screen_lines(transcript)[-1]

        await pilot.press("home")
        await until(pilot, lambda: not transcript.following)
        await pilot.press("end")
        await until(pilot, lambda: transcript.following and transcript.scroll_y == transcript.max_scroll_y)

        transcript.action_toggle_follow()
        assert not transcript.following
        trace.turn()
        transcript.refresh_trace()
        await pilot.pause()
        assert transcript.scroll_y < transcript.max_scroll_y and transcript.new_since_left == 2
        transcript.action_toggle_follow()
        await until(pilot, lambda: transcript.following and transcript.scroll_y == transcript.max_scroll_y)


HOSTILE = [
    "[bold red]x[/] [link=http://e]y[/link] [@click=app.quit]q[/] $accent [b]",
    "\x1b[31mred\x1b[0m \x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\",
    "\x1b]52;c;aGVsbG8=\x07 bell\x07 back\x08\x08 cr\rover \x9b2J del\x7f",
]
FORBIDDEN = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]}


async def test_trace_text_is_shown_literally():
    store = RolloutStore()
    trace = Trace(store)
    hostile = "\n".join(HOSTILE)
    trace.add(
        node("system", hostile, None),
        node("user", hostile, 0),
        node(
            "assistant",
            hostile,
            1,
            sampled=True,
            reasoning_content=hostile,
            tool_calls=[{"id": "c", "name": "[red]t\x1b[0m", "arguments": json.dumps({"command": hostile})}],
        ),
        calls=[call(2)],
    )
    trace.add(node("tool", hostile, 2, tool_call_id="\x1b[2J", name="[b]n"))
    trace.apply(pending=[{"role": "tool", "content": hostile}], errors=[{"type": "[red]E", "message": hostile}])
    app = TranscriptApp()
    async with app.run_test(size=(120, 90)) as pilot:
        transcript = app.query_one(Transcript)
        transcript.show(trace.key, trace.state)
        await until(pilot, lambda: transcript.virtual_size.height > 30)
        strips = [transcript.render_line(y) for y in range(transcript.scrollable_content_region.height)]
        shown = "\n".join(strip.text for strip in strips)
        for segment in (segment for strip in strips for segment in strip):
            assert not FORBIDDEN & set(segment.text), repr(segment.text)
            assert segment.control is None
            assert segment.style is None or segment.style.link is None
        for expected in (
            "[bold red]x[/] [link=http://e]y[/link] [@click=app.quit]q[/] $accent [b]",
            "␛[31mred␛[0m ␛]8;;http://evil␛\\click␛]8;;␛\\",
            "␛]52;c;aGVsbG8=␇ bell␇ back␈␈ cr␍over \\x9b2J del␡",
            "⚙ [red]t␛[0m",
            "tool  #3 · [b]n · ␛[2J",
            "✗ trace error · [red]E",
        ):
            assert expected in shown
        # system, user, reasoning, content, argument, tool result, trace error, pending
        assert shown.count("[bold red]x[/]") == 8
        screen = app.export_screenshot()
        assert "[bold red]x[/]" in screen.replace("&#160;", " ")


async def test_a_new_node_renders_only_its_own_block():
    store = RolloutStore()
    trace = Trace(store)
    for _ in range(30):
        trace.turn()
    async with showing(trace) as (app, pilot, transcript):
        await pilot.pause()
        blocks, headers = transcript.blocks_rendered, transcript.headers_rendered

        trace.add(node("tool", "one more", trace.nodes - 1, tool_call_id="x"))
        transcript.refresh_trace()
        assert (transcript.blocks_rendered, transcript.headers_rendered) == (blocks + 1, headers + 1)

        trace.add(node("assistant", "late call", trace.nodes - 1, sampled=True))
        transcript.refresh_trace()
        assert "1,200 → 34 tok" not in all_lines(transcript)[-3]
        trace.apply(calls=[call(trace.nodes - 1)])  # the call lands after its node
        transcript.refresh_trace()
        assert (transcript.blocks_rendered, transcript.headers_rendered) == (blocks + 2, headers + 3)
        assert "assistant  #61 · 1.50s · 1,200 → 34 tok" in all_lines(transcript)[-3]

        trace.apply(pending=[{"role": "user", "content": "preview"}])
        transcript.refresh_trace()
        trace.apply(pending=[{"role": "user", "content": "preview 2"}])
        transcript.refresh_trace()
        transcript.refresh_trace()  # nothing changed: nothing drawn
        assert transcript.blocks_rendered == blocks + 4
        assert sum("pending · sent" in line for line in all_lines(transcript)) == 1
        assert "preview 2" in "\n".join(all_lines(transcript)[-4:])


async def test_cursor_selects_a_block_to_copy():
    store = RolloutStore()
    trace = Trace(store)
    trace.add(node("user", "question\x1b[1m", None))
    trace.add(
        node("assistant", "let me look", 0, sampled=True,
             tool_calls=[{"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{not json"}}]),
        calls=[call(1)],
    )
    trace.add(node("tool", "file.txt\n", 1, tool_call_id="c"))
    async with showing(trace) as (app, pilot, transcript):
        transcript.focus()
        await pilot.pause()
        assert transcript.selected_block() == "file.txt\n"
        assert "⚙ ls  {not json  (arguments are not JSON)" in "\n".join(all_lines(transcript))
        await pilot.press("up")
        assert transcript.selected_block() == "file.txt\n"
        await pilot.press("up")
        assert transcript.selected_block() == "let me look\nls {not json"
        await pilot.press("left_square_bracket")
        assert transcript.selected_block() == "question\x1b[1m"
        await pilot.press("down", "escape")
        assert transcript._cursor is None


async def test_resize_rewraps_long_lines():
    store = RolloutStore()
    trace = Trace(store)
    trace.add(node("user", "word " * 60, None))
    app = TranscriptApp()
    async with app.run_test(size=(100, 30)) as pilot:
        transcript = app.query_one(Transcript)
        transcript.show(trace.key, trace.state)
        await pilot.pause()
        wide = transcript.virtual_size.height
        await pilot.resize_terminal(50, 30)
        await until(pilot, lambda: transcript.virtual_size.height > wide)
        assert all(len(line.rstrip()) <= 49 for line in screen_lines(transcript))


async def test_two_thousand_turns_render_and_scroll():
    store = RolloutStore()
    trace = Trace(store)
    for _ in range(2000):
        trace.turn("output " * 30)
    async with showing(trace) as (app, pilot, transcript):
        await until(pilot, lambda: transcript.scroll_y == transcript.max_scroll_y)
        assert screen_lines(transcript)[-2].startswith("▎ answer 3999")
        transcript.focus()
        await pilot.press("home")  # the top of the whole trace: all of it laid out
        await until(pilot, lambda: transcript.scroll_y == 0 and transcript.max_scroll_y > 19000)
        top = screen_lines(transcript)
        assert top[0].startswith("── turn 1 ─") and top[1].startswith("▎ tool  #0 · bash")
        transcript.scroll_to(y=transcript.max_scroll_y // 2, animate=False, immediate=True)
        await pilot.pause()
        assert any(line.startswith("▎ output") for line in screen_lines(transcript))
        trace.turn()
        transcript.refresh_trace()
        await pilot.pause()
        assert transcript.new_since_left == 2
        await pilot.press("end")
        await until(pilot, lambda: screen_lines(transcript)[-2].startswith("▎ answer 4001"))


async def test_empty_and_switched_traces():
    store = RolloutStore()
    first, second = Trace(store, "a"), Trace(store, "b")
    first.turn("first")
    second.turn("second")
    app = TranscriptApp()
    async with app.run_test(size=SIZE) as pilot:
        transcript = app.query_one(Transcript)
        transcript.show(None, None)
        await pilot.pause()
        assert transcript.selected_block() is None and not transcript._lines
        transcript.show("a", first.state)
        transcript.show("b", second.state)
        await pilot.pause()
        text = "\n".join(all_lines(transcript))
        assert "second 0" in text and "first" not in text
        await asyncio.sleep(0)


async def test_pending_clock_advances_without_rendering_blocks():
    now = [112.0]
    store = RolloutStore()
    trace = Trace(store)
    trace.add(node("user", "go", None))
    store.apply_delta(trace.key, {"trace": trace.id, "pending": [{"role": "user", "content": "go"}]}, t=100.0)
    app = TranscriptApp(clock=lambda: now[0])
    async with app.run_test(size=SIZE) as pilot:
        transcript = app.query_one(Transcript)
        transcript.show(trace.key, trace.state)
        await pilot.pause()
        assert "awaiting reply · 0:12 ━" in "\n".join(all_lines(transcript))
        blocks, lines = transcript.blocks_rendered, transcript.virtual_size.height
        now[0] = 165.0
        transcript._tick_pending()
        await pilot.pause()
        assert "awaiting reply · 1:05 ━" in "\n".join(screen_lines(transcript))
        assert (transcript.blocks_rendered, transcript.virtual_size.height) == (blocks, lines)
        store.failed(trace.key, "cancelled by the user", cancelled=True)
        transcript._tick_pending()
        await pilot.pause()
        assert "pending · sent to the model, no reply came ━" in "\n".join(screen_lines(transcript))


async def test_styles_follow_the_theme():
    store = RolloutStore()
    trace = Trace(store)
    trace.turn()
    async with showing(trace) as (app, pilot, transcript):
        await pilot.pause()
        dark = [segment.style for segment in transcript.render_line(1)]
        app.theme = "textual-light"
        await until(pilot, lambda: [segment.style for segment in transcript.render_line(1)] != dark)


async def test_the_outcome_closes_the_transcript() -> None:
    """Reward, each scorer's verdict and the metrics at the end,
    drawn literally, updated when the scores fill in."""
    store = RolloutStore()
    rollout = store.add_rollout("v", 0, {"name": "t"}, key="v/0")
    store.started(rollout.key, "r")
    store.apply_delta(rollout.key, {"trace": "t1", "open": {"id": "t1"}, "nodes": [{"message": {"role": "user", "content": "hi"}}]})
    store.apply_delta(rollout.key, {"trace": "t1", "set": {"rewards": {"correct": None}}})
    app = TranscriptApp()
    async with app.run_test(size=(100, 30)) as pilot:
        transcript = app.query_one(Transcript)
        transcript.show(rollout.key, rollout.traces["t1"])
        await pilot.pause()
        assert not any("outcome" in line for line in all_lines(transcript)), "seeded nulls are no outcome"
        verdict = {"score": 0.5, "weight": 2.0, "reason": "off by one \x1b[31m[bold]x[/bold]"}
        store.apply_delta(rollout.key, {"trace": "t1", "set": {"rewards": {"correct": verdict}, "metrics": {"turns": 3.0}, "ok": True, "stop_condition": "agent_completed"}})
        transcript.refresh_trace()
        await pilot.pause()
        lines = all_lines(transcript)
        at = next(i for i, line in enumerate(lines) if line.startswith("━━ outcome · reward 1.00 · ok · agent_completed"))
        tail = "\n".join(lines[at:])
        assert "correct  0.50 × 2" in tail and "reason: off by one ␛[31m[bold]x[/bold]" in tail and "turns 3" in tail



def varied_turns(trace: Trace) -> None:
    """Turns of one to three nodes, failed calls between nodes and after the last,
    calls landing with their node and after it, trace errors, a pending preview."""
    trace.add(node("system", "be brief", None), node("user", "go", 0))
    for turn in range(70):
        n = trace.nodes
        if turn % 9 == 4:
            trace.apply(calls=[call(None, {"error": "RateLimit", "message": f"slow down {turn}"})])
        trace.add(node("assistant", f"step {turn}\nthinking", n - 1, sampled=True), calls=[call(n)] if turn % 3 else None)
        if turn % 3 == 0:
            trace.apply(calls=[call(n)])  # the call lands after its node
        if turn % 4:
            trace.add(node("tool", f"output {turn}", n, tool_call_id=f"c{turn}"))
        if turn % 7 == 0:
            trace.add(node("user", f"nudge {turn}", trace.nodes - 1))
    trace.apply(calls=[call(None, {"error": "Timeout", "message": "gave up"})])
    trace.apply(errors=[{"error": "Crash", "message": "the env fell over"}])
    trace.apply(pending=[{"role": "user", "content": "next question"}])


async def test_a_long_trace_lays_out_its_newest_turns_then_the_rest_as_they_are_needed():
    """Shown at once, a long trace lays out two screens of its newest turns; scrolling
    up lays out earlier ones above without moving the view, and the whole is what the
    live path draws delta by delta (turn numbers, failed and late calls included)."""
    store = RolloutStore(clock=lambda: 50.0)
    app = TranscriptApp(clock=lambda: 100.0)
    async with app.run_test(size=SIZE) as pilot:
        transcript = app.query_one(Transcript)
        streamed = Trace(store, "streamed")
        transcript.show(streamed.key, streamed.state)
        streamed.after = transcript.refresh_trace
        varied_turns(streamed)
        expected = all_lines(transcript)

        shown = Trace(store, "shown")
        varied_turns(shown)
        transcript.show(shown.key, shown.state)
        await pilot.pause()
        newest = all_lines(transcript)
        assert 2 * SIZE[1] <= len(newest) < len(expected) // 4
        assert newest == expected[-len(newest) :]
        assert transcript.scroll_y == transcript.max_scroll_y

        while transcript.virtual_size.height < len(expected):
            transcript.scroll_to(y=0, animate=False, immediate=True)
            view = screen_lines(transcript)
            await until(pilot, lambda: transcript.scroll_y > 0 or transcript.virtual_size.height == len(expected))
            assert screen_lines(transcript) == view
        assert all_lines(transcript) == expected

        transcript.show(streamed.key, streamed.state)
        transcript.show(shown.key, shown.state)
        transcript.search("output 1")  # a search sees every line, not only those laid out
        matches = sum("output 1" in line for line in expected)
        assert matches > 5 and transcript.search_status == f"1/{matches}"
        assert transcript.plain_lines() == expected
