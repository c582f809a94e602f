"""The command line's own words: version, help with defaults."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from tui.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_version(capsys):
    """Issue 11 item 21."""
    assert run(capsys, "--version").strip() == f"tracewatch {version('tracewatch')}"


def test_attach_help_names_its_defaults(capsys):
    """Issue 11 item 21: `attach --help` shows what an option is when not given."""
    text = " ".join(run(capsys, "attach", "--help").split())
    for default in ("rollouts per task (default: 1)", "(default: 4)", "(default: gpt-4.1-mini)", "(default: OPENAI_API_KEY)"):
        assert default in text
    assert "(default: None)" not in text and "(default: False)" not in text
