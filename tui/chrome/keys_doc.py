"""docs/keys.md, written from `tracewatch.tui.chrome.keys.KEYS` so the page cannot drift from the bindings:
`python -m tracewatch.tui.chrome.keys_doc > docs/keys.md` (a test holds the committed page to this text)."""

from __future__ import annotations

from tracewatch.tui.chrome.keys import KEYS, WHERE

INTRO = """\
# Keys

Every key tracewatch binds, by where it works: the same table the bindings, the command
palette (`ctrl+p`) and the help screen (`?`) are read from (`tui/chrome/keys.py`). This page is
generated from it: `python -m tracewatch.tui.chrome.keys_doc > docs/keys.md`.

The footer shows the focused pane's own keys first (the Compare tab's Enter, the
Timeline's zoom, the transcript's End), then the main keys, so it says where a key goes;
below 100 columns it drops the space around them, so an 80-column terminal shows every
main one with the table focused; keys that do not fit (a focused pane's own come
first) are left off from the end, and a `…` before `^p` says so (`?` lists them all). A replay or an opened recording leaves `s`, `x` and `c`
off it (pressed, they say the session is read-only) for its own keys.

The mouse works too: click rows (a Compare tab task opens its traces side by side),
column headers (to sort), tabs, a card's buttons and the "+N new" badge.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The page: one table per place a key works, in the help screen's order."""
    parts = [INTRO]
    for where, heading in WHERE.items():
        keys = [key for key in KEYS if key.where == where]
        if not keys:
            continue
        rows = [f"## {heading}", "", "| key | action |", "|---|---|"]
        rows += [f"| `{_cell(key.shown)}` | {_cell(key.local_help)} |" for key in keys]
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def main() -> None:
    print(render(), end="")


if __name__ == "__main__":
    main()
