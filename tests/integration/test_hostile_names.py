"""Names that would leave the session folder or disguise themselves: a variant name is
refused with the reason wherever it is given (a config, `--name`), a name read from
elsewhere becomes a file name that stays in its folder, and headless output shows a
direction character as its escape, as trace text does."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.demo_sessions import demo_variant, write_config
from tests.support.repo import REPO
from tracewatch.core.engine.headless import run_headless
from tracewatch.core.engine.live import LiveSession
from tracewatch.core.paths import file_name
from tracewatch.core.session.config import load_config
from tracewatch.core.session.config_errors import ConfigError
from tracewatch.core.text import ESCAPES

DIRECTION = "\u202e\u2066\u200f\u061c\u200b"


def tracewatch(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRACEWATCH_HOME": str(cwd / "home"), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "tracewatch.cli", *argv], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def toml_string(text: str) -> str:
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\U{ord(c):08x}" for c in text) + '"'


def named(name: str) -> str:
    return demo_variant("ok", ["normal"]).replace('name = "ok"', f"name = {toml_string(name)}")


def everything_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("name", ["../../../escape-1", "a/b", ".", "..", ".hidden", "a\\b", "x\u202etxt.exe"])
def test_a_config_name_that_leaves_its_folder_is_refused_before_anything_runs(tmp_path, name):
    work = tmp_path / "deep" / "er" / "work"
    work.mkdir(parents=True)
    config = write_config(work, [demo_variant(name, ["normal"])])
    before = everything_under(tmp_path)

    done = tracewatch("--headless", str(config), cwd=work)

    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "variants[0].name: expected a name without path separators, '..', a leading dot" in done.stderr
    assert "Traceback" not in done.stderr and not any(c in done.stderr for c in DIRECTION)
    assert everything_under(tmp_path) == before


def test_eval_name_that_leaves_its_folder_is_refused(tmp_path):
    done = tracewatch("eval", "--name", "../../../escape-2", "--headless", "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "eval: argument --name: expected a name without path separators" in done.stderr  # the command line's words
    assert "got '../../../escape-2', which has a path separator" in done.stderr
    assert not list(tmp_path.parent.rglob("escape-2*"))


HOSTILE_PIECES = st.sampled_from(["/", "\\", "..", ".", *(chr(c) for c in ESCAPES if not 0xD800 <= c < 0xE000)])  # TOML holds no surrogates
HOSTILE_NAMES = st.builds(
    lambda head, piece, tail: head + piece + tail,
    st.text(max_size=10), HOSTILE_PIECES, st.text(max_size=10),
).filter(lambda name: name.strip() and len(name) <= 64 and (name.startswith(".") or ".." in name or any(
    c in name for c in "/\\\x00\u2028") or any(ord(c) in ESCAPES for c in name)))  # fmt: skip


@settings(max_examples=200)
@given(name=HOSTILE_NAMES)
def test_generated_hostile_names_are_refused_without_printing_them_raw(name):
    with tempfile.TemporaryDirectory() as folder:
        config = write_config(Path(folder), [named(name)])
        try:
            load_config(config)
        except ConfigError as error:
            message = str(error)
        else:
            raise AssertionError(f"{name!r} was accepted")
    assert "variants[0].name: expected a name without path separators" in message
    assert not any(ord(c) in ESCAPES for c in message.replace("\n", ""))


@given(name=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_ -]{0,40}(\.[a-z]{1,4})?", fullmatch=True))
def test_plain_names_are_accepted(name):
    with tempfile.TemporaryDirectory() as folder:
        config = write_config(Path(folder), [named(name)])
        assert load_config(config).variants[0].name == name


@given(text=st.text(max_size=30))
def test_a_file_name_from_any_text_stays_in_its_folder(text):
    folder = Path("/srv/session")
    path = folder / file_name(text)
    assert os.path.normpath(path).rpartition("/")[0] == str(folder)
    assert not path.name.startswith(".") and path.name.isprintable()


async def test_a_direction_character_in_headless_output_is_escaped(tmp_path):
    task = f'{{ id = "t", name = "invoice{DIRECTION}fdp.exe", prompt = "p", scenario = "normal", kind = "coding" }}'
    variant = demo_variant("names", ["normal"]).replace("tasks = [", f"tasks = [{task}, ", 1)
    engine = LiveSession(load_config(write_config(tmp_path, [variant])), session_dir=tmp_path / "session")
    out = io.StringIO()
    assert await run_headless(engine, out=out) == 0, out.getvalue()
    printed = out.getvalue()
    assert "[invoice\\u202e\\u2066\\u200f\\u061c\\u200bfdp.exe] done" in printed
    assert not any(c in printed for c in DIRECTION)


CONTROLS = st.sampled_from([
    "\x1b", "\x1b]52;c;aGlqYWNrZWQ=\x07", "\x1b]52;c;aGlqYWNrZWQ=\x1b\\", "\x1b[2J\x1b[H", "\x9b31m", "\x9d52;c;eA==\x9c",
    "\x85", "\x07", "\r", "\x08", "\u202e", "\u2066", "\u200f", "\u061c", "\ufeff",
])  # fmt: skip
"""ESC, OSC 52 (a clipboard write) ended by BEL or ST, CSI, their 8-bit C1 forms, C0
controls, and direction and invisible characters."""
SOURCE_NAMES = st.builds(lambda head, control, tail: head + control + tail, st.text(max_size=6), CONTROLS, st.text(max_size=6)).map(
    lambda name: name.replace("/", "_").replace("\x00", "_")
)
"""Names a source may hold (a run folder's name among them: no separator, no NUL)."""


def raw_controls(printed: str, allowed: str = "\n") -> list[str]:
    return [c for c in printed if ord(c) in ESCAPES and c not in allowed]


def exported_run(folder: Path, names: list[str]) -> Path:
    """A run directory of episodes as `export --episodes` writes them: each names its
    variant (`env.name`), rollout and task by one of `names`."""
    from tests.support.tui_standin import fixture_episodes
    from tracewatch.core.recordings.export import ORIGIN_KEY

    folder.mkdir(parents=True)
    lines = []
    for number, (name, episode) in enumerate(zip(names * 2, fixture_episodes() * 2)):
        episode["env"] = {"name": name}
        episode["task"]["data"]["name"] = f"task {name}"
        episode[ORIGIN_KEY] = {"rollout": f"{name}/{number}", "variant": name, "task_index": 0, "rollout_index": number, "ended": "done"}
        lines.append(json.dumps(episode) + "\n")
    (folder / "traces.jsonl").write_text("".join(lines))
    return folder


@settings(max_examples=4, deadline=None)
@given(names=st.lists(SOURCE_NAMES, min_size=2, max_size=3, unique=True), folder=SOURCE_NAMES)
def test_no_command_prints_a_control_character_from_a_source(names, folder):
    """Run folder names in `open`'s error, variant names and task labels in `compare`
    and `open --headless`, rollout keys in `tokens --rollout`'s error and `export`:
    every control, escape sequence and direction character shows as its escape."""
    with tempfile.TemporaryDirectory() as work:
        run = exported_run(Path(work) / f"run {folder}", names)
        missing = Path(work) / f"gone {folder}"
        for argv, allowed in [
            (("open", str(missing)), "\n"),
            (("open", "--headless", str(run)), "\n"),
            (("compare", str(run), str(run)), "\n"),
            (("tokens", str(run), "--rollout", f"no such {folder}"), "\n"),
            (("tokens", str(run), "--rollout", f"{names[0]}/0"), "\n\t"),
            (("export", str(run), str(Path(work) / "events.json"), "--trace-events"), "\n"),
        ]:
            done = tracewatch(*argv, cwd=Path(work))
            printed = done.stdout + done.stderr
            assert "Traceback" not in printed, (argv, printed)
            assert not raw_controls(printed, allowed), (argv, printed)
            assert done.returncode in (0, 1, 2), (argv, done.returncode)


def test_an_osc_52_in_a_folder_name_is_shown_not_sent(tmp_path):
    osc = "\x1b]52;c;aGlqYWNrZWQ=\x07"
    done = tracewatch("open", str(tmp_path / f"run{osc}"), cwd=tmp_path)
    assert done.returncode == 2 and "␛]52;c;aGlqYWNrZWQ=␇" in done.stderr and "\x1b" not in done.stderr
    run = exported_run(tmp_path / "run", [f"a{osc}", "b\u202e"])
    done = tracewatch("compare", str(run), cwd=tmp_path)
    assert done.returncode == 0 and "a␛]52;c;aGlqYWNrZWQ=␇" in done.stdout and "b\\u202e" in done.stdout, done.stdout
    assert not raw_controls(done.stdout + done.stderr)
