"""Trace text is shown literally: no markup, no control sequence reaches the terminal."""

from rich.cells import cell_len

from tracewatch.tui.drawing.literal import safe, safe_lines, wrap

HOSTILE = (
    "[bold red]x[/] [link=http://e]y[/link] [@click=app.quit]z[/] "
    "\x1b[31mred\x1b[0m \x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\ "
    "\x1b]52;c;aGVsbG8=\x07 bell\x07 back\x08\x08 cr\r del\x7f csi\x9b2J "
    "bidi\u202eevil\u202c sep\u2028 lone\ud800"
)
CONTROLS = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} | {"\u202e", "\u202c", "\u2028", "\ud800"}


def test_safe_shows_every_control_visibly():
    shown = safe(HOSTILE + "\nnext\tcol")
    assert not CONTROLS & set(shown)
    assert "␛[31mred␛[0m" in shown
    assert "␛]8;;http://evil␛\\link" in shown
    assert "␛]52;c;aGVsbG8=␇" in shown
    assert "back␈␈ cr␍ del␡ csi\\x9b2J" in shown
    assert "bidi\\u202eevil\\u202c sep\\u2028 lone\\ud800" in shown
    assert "␊next    col" in shown
    assert "[bold red]x[/]" in shown


def test_plain_text_is_returned_as_is():
    text = "plain text, unicode ✓ 日本"
    assert safe(text) is text


def test_safe_lines_splits_and_escapes_each_line():
    assert safe_lines("a\tb\n\x1b[2Jc\r\n") == ["a   b", "␛[2Jc␍", ""]
    assert safe_lines("one\ntwo") == ["one", "two"]


def test_wrap_fits_width_and_keeps_every_character():
    for text in ("word " * 40, "x" * 95, "日本語のテキスト hello 世界 wrapping 测试" * 3, "", "short"):
        for width in (1, 7, 20, 33):
            ranges = wrap(text, width)
            assert "".join(text[a:b] for a, b, _ in ranges).replace(" ", "") == text.replace(" ", "")
            for start, end, cells in ranges:
                assert cell_len(text[start:end]) == cells <= width or end - start == 1


def test_wrap_prefers_spaces():
    text = "the quick brown fox jumps over the lazy dog"
    assert [text[a:b].strip() for a, b, _ in wrap(text, 16)] == ["the quick brown", "fox jumps over", "the lazy dog"]
