"""The token view in the real app (run_test): opened from the transcript by key and by
double click, coloured stream by stream, every stream's value under the cursor, live
while a turn lands, offline from a recording, without a tokenizer, and on hostile
nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from tests.support.app_screen import screen_text
from tests.support.polling import until
from tests.support.training_session import KEY, training_deltas, training_engine, write_training_recording
from tracewatch.cli import main
from tracewatch.core.demo import vocabulary
from tracewatch.core.engine.opened import OpenedRecording
from tracewatch.core.tokens.streams import read_message, token_values
from tracewatch.core.tokens.tokenizer import Tokenizers
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.tokens.token_lines import TokenLines
from tracewatch.tui.tokens.token_view import TokenScreen, values_text

DEMO_TOKENIZER = Tokenizers(by_variant={"trainer": str(vocabulary.PATH)})
"""Named by the variant, as a config does (the app's default finds it by the demo's model)."""


def shown(screen: TokenScreen, widget_id: str) -> str:
    rendered = screen.query_one(f"#{widget_id}", Static).render()
    return rendered.plain if isinstance(rendered, Text) else str(rendered)


def body(lines: TokenLines) -> str:
    assert lines.placed is not None
    lines.placed.finish()
    return "\n".join(lines.placed.text(line) for line in range(len(lines.placed)))


async def open_tokens(pilot, app: TracewatchApp, *keys: str) -> TokenScreen:
    await until(pilot, lambda: app.table.row_count == len(app.store.rollouts))
    app.table.select(KEY)
    await until(pilot, lambda: app.trace_pane.transcript.trace_state is not None)
    await pilot.press(*keys)
    return await until(pilot, lambda: isinstance(app.screen, TokenScreen) and app.screen.lines.placed is not None and app.screen.lines.tokens is not None and app.screen)


@pytest.fixture(scope="module")
def deltas() -> list[dict]:
    import asyncio

    return asyncio.run(training_deltas())


async def test_t_opens_the_newest_message_and_each_key_does_what_it_says(deltas: list[dict]) -> None:
    app = TracewatchApp(training_engine(deltas), tokenizers=DEMO_TOKENIZER)
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await open_tokens(pilot, app, "t")
        trace = screen.trace
        assert screen.node == len(trace.nodes) - 1
        head = shown(screen, "tokens-head")
        tokens = read_message(trace.nodes[screen.node])
        last = len(trace.nodes) - 1
        assert f"assistant #{last} · {len(trace.nodes)} messages (#0-#{last})" in head
        assert f"{len(tokens):,} tokens · {tokens.trained:,} trained" in head
        assert "text: core/demo/tokenizer.json" in head or f"text: {vocabulary.PATH}" in head
        text = body(screen.lines)
        assert text.startswith("<|im_start|>") and text.rstrip().endswith("<|im_end|>")
        assert "`[bold]`·markup" in text  # trace text is data: no markup, spaces shown

        # back to the turn where the trainer disagrees: the header says where
        mismatched = next(index for index in range(len(trace.nodes)) if "worst trainer-sampler -" in _head_of(trace, index))
        await pilot.press(*["left_square_bracket"] * (screen.node - mismatched))
        await until(pilot, lambda: screen.node == mismatched)
        await pilot.press("full_stop")  # logprob -> probability
        assert screen.lines.stream is not None and screen.lines.stream.key == "probability"
        await pilot.press("comma", "comma")  # -> loss weight policy (wraps around)
        assert screen.lines.stream.key == "loss:policy"
        for _ in range(7):
            await pilot.press("full_stop")
        assert screen.lines.stream.key == "mismatch"
        assert " trainer - sampler logprob " in shown(screen, "tokens-head")

        await pilot.press("right", "right", "right", "right", "right")
        tokens = screen.lines.tokens
        assert screen.lines.cursor == 5 and tokens is not None
        at = shown(screen, "tokens-at")
        values = token_values(tokens, 5)
        assert at.startswith(f"#5 id {values['id']} ")
        assert f"logprobs {values['logprobs']:.4f}" in at and f"advantages {values['advantages']:.4f}" in at
        assert f"loss_weights[policy] {values['loss_weights[policy]']:.4f}" in at
        await pilot.press("end")
        assert screen.lines.cursor == len(tokens) - 1
        await pilot.press("home", "down")
        assert screen.lines.cursor is not None and screen.lines.cursor > 0
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, TokenScreen))


async def test_a_values_line_wider_than_the_screen_ends_with_an_ellipsis(deltas: list[dict]) -> None:
    """At 80 columns a sampled token's values ran past the edge and were cut with no sign."""
    app = TracewatchApp(training_engine(deltas), tokenizers=DEMO_TOKENIZER)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_tokens(pilot, app, "t")
        tokens = screen.lines.tokens
        assert tokens is not None
        sampled = next(index for index in range(len(tokens)) if len(values_text(tokens, screen.lines.pieces[index], index)) > 80)
        await pilot.press(*["right"] * sampled)
        await until(pilot, lambda: screen.lines.cursor == sampled)
        full = shown(screen, "tokens-at")
        at = screen.query_one("#tokens-at", Static)
        drawn = at.render_line(0).text.strip()
        assert drawn.endswith("…") and full.startswith(drawn[:-1]), f"drawn {drawn!r} of {full!r}"


async def test_a_header_taller_than_its_room_scrolls_with_a_bar_and_loses_no_line(deltas: list[dict]) -> None:
    """At 80x24 the header wraps past its eight rows: its last lines (the legend's end,
    the tokenizer's note) were cut with no sign. It scrolls now, its scrollbar shown,
    and its last line can be scrolled to."""
    app = TracewatchApp(training_engine(deltas), tokenizers=DEMO_TOKENIZER)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_tokens(pilot, app, "t")
        box = screen.query_one("#tokens-head-box", VerticalScroll)
        await until(pilot, lambda: box.virtual_size.height > box.size.height, "the header wrapped past its room")
        assert box.size.height <= 8 and box.show_vertical_scrollbar, (box.size, box.virtual_size)
        last = shown(screen, "tokens-head").splitlines()[-1].split()
        assert last[-1] not in screen_text(app), "the header's last line already shows"
        box.scroll_end(animate=False)
        await until(pilot, lambda: box.scroll_y == box.max_scroll_y > 0, "scrolled to the header's end")
        await until(pilot, lambda: last[-1] in screen_text(app), "the header's last line drawn")
        assert last[0] in screen_text(app), last


async def test_the_header_names_a_trained_tool_result(deltas: list[dict]) -> None:
    """The demo's `training` task trains one tool result: its header says so in words,
    not only as a count of trained tokens beside a stream that does not fit."""
    app = TracewatchApp(training_engine(deltas), tokenizers=DEMO_TOKENIZER)
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await open_tokens(pilot, app, "t")
        trace = screen.trace
        tool = next(i for i, node in enumerate(trace.nodes) if node["message"]["role"] == "tool" and read_message(node).trained)
        await pilot.press(*["left_square_bracket"] * (screen.node - tool))
        await until(pilot, lambda: screen.node == tool and f"tool #{tool} ·" in shown(screen, "tokens-head"), "the trained tool result open")
        trained = read_message(trace.nodes[tool]).trained
        head = shown(screen, "tokens-head").splitlines()
        assert f"⚠ a tool result is trained: {trained:,} tokens the model did not sample are in the loss" in head, head
        await pilot.press(*["right_square_bracket"] * (len(trace.nodes) - 1 - tool))
        await until(pilot, lambda: screen.node == len(trace.nodes) - 1)
        assert "is trained" not in shown(screen, "tokens-head")


def _head_of(trace, index: int) -> str:
    from tracewatch.core.tokens.summary import summarize
    from tracewatch.tui.tokens.token_view import summary_text

    return summary_text(summarize(read_message(trace.nodes[index]))).plain


async def test_a_double_click_opens_that_message(deltas: list[dict]) -> None:
    app = TracewatchApp(training_engine(deltas), tokenizers=DEMO_TOKENIZER)
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: app.table.row_count == 1)
        app.table.select(KEY)
        transcript = app.trace_pane.transcript
        await until(pilot, lambda: transcript.trace_state is not None and transcript.plain_lines())
        transcript.action_scroll_home()
        await pilot.pause()
        await pilot.click(transcript, offset=(5, 2), times=2)
        screen = await until(pilot, lambda: isinstance(app.screen, TokenScreen) and app.screen)
        assert screen.node == transcript.selected_node() == 0
        await until(pilot, lambda: "system #0 ·" in shown(screen, "tokens-head"), lambda: f"the header drawn; {shown(screen, 'tokens-head')!r}")


async def test_a_turn_that_lands_while_open_is_shown(deltas: list[dict]) -> None:
    first_turn = next(index for index, delta in enumerate(deltas) if delta.get("nodes")) + 1
    engine = training_engine(deltas[:first_turn])
    app = TracewatchApp(engine, tokenizers=DEMO_TOKENIZER)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_tokens(pilot, app, "t")
        before = len(screen.trace.nodes)
        assert screen.node == before - 1
        for delta in deltas[first_turn:]:
            engine.store.apply_delta(KEY, delta)
        await until(pilot, lambda: screen.node == len(screen.trace.nodes) - 1 > before - 1, "the view moved to the newest message")
        assert f"assistant #{len(screen.trace.nodes) - 1} · {len(screen.trace.nodes)} messages" in shown(screen, "tokens-head")


async def test_a_recording_opened_offline_shows_the_same_tokens(deltas: list[dict], tmp_path: Path) -> None:
    path = tmp_path / "training.twrec"
    write_training_recording(path, deltas)
    app = TracewatchApp(OpenedRecording(path), tokenizers=DEMO_TOKENIZER)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_tokens(pilot, app, "t")
        live = training_engine(deltas).store.rollouts[KEY]
        (trace,) = live.traces.values()
        assert body(screen.lines).startswith("<|im_start|>assistant")
        assert token_values(screen.lines.tokens, 3) == token_values(read_message(trace.nodes[-1]), 3)


async def test_without_a_tokenizer_ids_show_with_how_to_get_text(deltas: list[dict]) -> None:
    app = TracewatchApp(training_engine(deltas), tokenizers=Tokenizers())
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_tokens(pilot, app, "t")
        tokens = screen.lines.tokens
        assert tokens is not None
        assert body(screen.lines).startswith(f"⟨{tokens.ids[0]}⟩⟨{tokens.ids[1]}⟩")
        assert "--tokenizer PATH" in shown(screen, "tokens-head")


async def test_a_hostile_message_is_shown_with_its_findings(deltas: list[dict]) -> None:
    opened = next(delta for delta in deltas if delta.get("open"))
    hostile = {
        "parent": None, "message": {"role": "assistant", "content": "\x1b[31m[red]x[/red]"}, "sampled": True,
        "token_ids": [1, 2, 3, "four", 2**64 - 1], "mask": [False, True, True, True], "is_content": [True] * 5,
        "logprobs": [float("nan"), float("inf"), "x"], "advantages": [1.0], "entropies": {"no": "list"},
        "loss_weights": {"\x1b[2Jevil": [1, 2]},
    }
    engine = training_engine([{"trace": opened["trace"], "open": opened["open"], "nodes": [hostile]}])
    app = TracewatchApp(engine, tokenizers=DEMO_TOKENIZER)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_tokens(pilot, app, "t")
        head = shown(screen, "tokens-head")
        assert "⚠ mask has 4 flags for 5 tokens" in head
        assert "⚠ token_ids: 2 of 5 are not token ids (shown as -1)" in head
        assert "⚠ loss_weights[␛[2Jevil] has 2 values for 5 tokens: not placed" in head
        assert "\x1b" not in head
        for _ in range(6):
            await pilot.press("full_stop")
        await pilot.press("end")
        assert shown(screen, "tokens-at").startswith("#4 id -1 ")


async def test_the_first_paint_already_shows_the_message(deltas: list[dict], monkeypatch: pytest.MonkeyPatch) -> None:
    """The message is read as the view mounts and laid out as its lines get their size,
    so no empty view is drawn first (a paint and an event-loop turn the user waits for)."""
    drawn: list[bool] = []
    original = TokenLines.render_line

    def render_line(self: TokenLines, y: int):
        strip = original(self, y)
        drawn.append(self.placed is not None and strip.text.strip() != "")
        return strip

    monkeypatch.setattr(TokenLines, "render_line", render_line)
    app = TracewatchApp(training_engine(deltas), tokenizers=DEMO_TOKENIZER)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_tokens(pilot, app, "t")
        await until(pilot, lambda: any(drawn))
        assert drawn[0], f"{drawn.index(True)} lines drawn empty before the message"


async def test_a_message_has_one_number_in_the_transcript_the_token_view_and_the_command(
    deltas: list[dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The transcript said "assistant #13", the token view "message 14 of 14" and
    `tokens --node 13` "node 13": the same message, numbered two ways. Each says
    "assistant #N" now, N as the transcript counts from #0."""
    app = TracewatchApp(training_engine(deltas), tokenizers=DEMO_TOKENIZER)
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await open_tokens(pilot, app, "t")
        last = len(screen.trace.nodes) - 1
        head = shown(screen, "tokens-head")
        await pilot.press("escape")
        transcript = app.trace_pane.transcript
        await until(pilot, lambda: any(line.startswith(f"▎ assistant  #{last}") for line in transcript.plain_lines()), f"the transcript's assistant #{last}")
    assert f"assistant #{last} ·" in head, head
    path = tmp_path / "training.twrec"
    write_training_recording(path, deltas)
    assert main(["tokens", str(path), "--rollout", KEY, "--node", str(last)]) == 0
    printed = capsys.readouterr().out.splitlines()[0]
    assert f"· assistant #{last} ·" in printed, printed
