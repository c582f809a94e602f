"""The command line's own words: version, help with defaults."""

from __future__ import annotations

import socket
from importlib.metadata import version

import pytest

from tests.support.tui_standin import make_engine
from tracewatch.cli import _live_config, attach_parser, main, where_things_went


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_version(capsys):
    """`--version` names the installed version."""
    assert run(capsys, "--version").strip() == f"tracewatch {version('tracewatch')}"


def test_attach_help_names_its_defaults(capsys):
    """`attach --help` shows what an option is when not given."""
    text = " ".join(run(capsys, "attach", "--help").split())
    for default in ("rollouts per task (default: 1)", "(default: 4)", "(default: gpt-4.1-mini)", "(default: OPENAI_API_KEY)"):
        assert default in text
    assert "(default: None)" not in text and "(default: False)" not in text


def test_attach_takes_a_short_name_and_a_health_timeout(tmp_path):
    """Not "127.0.0.1:42911" in every row; --health-timeout."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "t"}\n')
    with socket.create_server(("127.0.0.1", 0)) as listening:
        address = f"tcp://127.0.0.1:{listening.getsockname()[1]}"
        args = attach_parser().parse_args([address, "--tasks", str(tasks)])
        assert _live_config("attach", args).variants[0].name == "attached"
        args = attach_parser().parse_args([address, "--tasks", str(tasks), "--name", "pool", "--health-timeout", "5"])
        (variant,) = _live_config("attach", args).variants
    assert (variant.name, variant.health_timeout, variant.attach) == ("pool", 5.0, address)


def test_after_the_screen_closes_it_says_where_the_recording_and_exports_are(tmp_path):
    """`--export-dir`, and both paths printed on quit."""
    engine = make_engine(session_dir=tmp_path / "session")
    engine.recording_path = tmp_path / "r.twrec"
    engine.export_dir = tmp_path / "mine"
    assert where_things_went(engine, recorded=True) == [f"recording: {tmp_path / 'r.twrec'}"]
    path = engine.export_episode("baseline/run0/0")
    assert path.parent == tmp_path / "mine"
    assert where_things_went(engine, recorded=True)[1] == f"exported 1 episode(s) to {tmp_path / 'mine'}"
    assert where_things_went(engine, recorded=False) == [f"exported 1 episode(s) to {tmp_path / 'mine'}"]
