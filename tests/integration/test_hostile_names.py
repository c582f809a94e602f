"""Names that would leave the session folder or disguise themselves: a variant name is
refused with the reason wherever it is given (a config, `--name`), a name read from
elsewhere becomes a file name that stays in its folder, and headless output shows a
direction character as its escape, as trace text does."""

from __future__ import annotations

import io
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
