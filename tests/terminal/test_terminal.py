"""The `tracewatch` command as a user runs it: the built-in demo in a real terminal
(tmux), driven by keys and read off the screen; the headless mode; every
subcommand's --help; and a config typo's exit status and suggestion."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.demo_sessions import demo_variant, write_config
from tests.support.polling import alive, wait_until
from tests.support.terminal import TIMEOUT, Terminal, our_processes, tracewatch
from tracewatch.core.demo.builtin_config import demo_config

pytestmark = pytest.mark.terminal


def run_cli(*args: str, home: Path, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRACEWATCH_HOME": str(home)}
    return subprocess.run([*tracewatch(), *args], env=env, capture_output=True, text=True, timeout=timeout)


def still_ours(pid: int, marker: str) -> bool:
    """A pid found earlier still runs a supervisor of this test or a demo server (not
    a recycled pid)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in args or "tracewatch.core.demo" in args


def session_pids(home: Path) -> set[int]:
    """Every supervisor and server pid the session's supervisor records name."""
    pids = set()
    for record in (home / "sessions").glob("*/*/supervisor.json"):
        data = json.loads(record.read_text())
        pids.update(pid for pid in (data.get("supervisor_pid"), data.get("child_pid")) if pid)
    return pids


DEMO_ROLLOUTS = sum(len(v.task_list()) * v.rollouts_per_task for v in demo_config(sys.executable).variants)
"""What the built-in demo runs, read from its own config (it grows as scenarios are added)."""


def rows(screen: str, variant: str) -> list[str]:
    """The table's rows of a variant (its name, then the column gap)."""
    return [line for line in screen.splitlines() if re.match(rf" {variant} {{2,}}\S", line)]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux to drive a real terminal (CI installs it)")
def test_demo_in_a_terminal_cancel_a_rollout_and_a_variant_then_quit(tmp_path: Path) -> None:
    """The whole product in one command: it shows the demo's rollouts running; the
    stuck one, found with the filter, is cancelled with `c`; a variant with `x y`;
    `q` exits 0 and leaves no process behind."""
    home = tmp_path / "home"
    recording = tmp_path / "r.twrec"
    status = tmp_path / "exit-status"
    command = shlex.join(
        # COLUMNS/LINES (pytest exports them) would override the terminal's real size
        ["env", "-u", "COLUMNS", "-u", "LINES", f"TRACEWATCH_HOME={home}", *tracewatch(), "--speed", "4", "--record", str(recording)]
    ) + f"; echo $? > {shlex.quote(str(status))}"
    term = Terminal(f"tw-test-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    found: set[int] = set()
    try:
        term.start(command, tmp_path)
        running = re.compile(rf"{DEMO_ROLLOUTS} rollouts · [1-9]\d* running")
        term.wait(running.search, "the demo's rollouts to run")
        tmux_server = int(term.pane("#{pid}"))  # its command line names the home too

        def started() -> bool:
            """Both supervisors and the servers their records name (one variant may run
            before the other's supervisor has written its record); all kept for cleanup."""
            supervisors = {pid for pid, args in our_processes(str(home)).items() if "supervisor" in args}
            found.update(supervisors | session_pids(home))
            return len(supervisors) == 2 and len(found) == 4

        wait_until(started, TIMEOUT, "two supervisors and two servers")

        term.keys("/", "stuck")
        term.wait(lambda s: len(rows(s, "baseline")) == len(rows(s, "candidate")) == 1, "the filter to leave the two stuck rows")
        term.keys("Enter")
        # a queued rollout would be cancelled before it starts: wait for the run
        term.wait(lambda s: all(" agent " in row for row in rows(s, "baseline") + rows(s, "candidate")), "both stuck runs in their agent phase")
        term.keys("c")
        screen = term.wait(lambda s: "cancelled" in "".join(rows(s, "baseline")), "the stuck rollout's row to say cancelled")
        assert "cancelled" not in "".join(rows(screen, "candidate"))
        term.wait(lambda s: "aborted" in s, "the trace title to give the server's reason")

        term.keys("x")
        term.wait(lambda s: "Cancel variant baseline?" in s, "the confirmation")
        term.keys("y")
        term.wait(lambda s: re.search(r"baseline\s+cancelled\b", s), "baseline's card to say cancelled")
        screen = term.screen()
        assert re.search(r"candidate\s+(running|draining)\b", screen), screen

        term.keys("q")
        # the shell that started the app writes its status (tmux sometimes never
        # reaps a pane's process under load, so it cannot be asked)
        wait_until(
            lambda: status.exists() and status.read_text().strip(),
            TIMEOUT,
            lambda: f"the app to exit; {term.processes()}\n{term.screen()}",
            every=0.1,
        )
        assert status.read_text().strip() == "0", term.screen()
        found |= session_pids(home)
        left = {pid: args for pid, args in our_processes(str(home)).items() if pid != tmux_server}
        assert not [pid for pid in found if alive(pid)] and not left, left
        assert recording.stat().st_size > 0
    finally:
        term.kill()  # the app gets SIGHUP; its supervisors see it go and stop their servers
        for pid in found:
            if alive(pid) and still_ours(pid, str(home)):
                os.kill(pid, signal.SIGKILL)


def test_headless_prints_progress_and_a_summary_and_fails_on_a_failed_rollout(tmp_path: Path) -> None:
    """A CI job reads the lines and the status: one failing rollout makes it 1."""
    config = write_config(tmp_path, [demo_variant("base", ["normal", "failing"]), demo_variant("cand", ["normal"])])
    recording = tmp_path / "run.twrec"
    done = run_cli(str(config), "--headless", "--record", str(recording), home=tmp_path / "home")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for line in ("base: starting", "base: running", "base: done", "cand: running", "cand: done"):
        assert line in lines
    for key, task in (("base/0", "normal task"), ("base/1", "failing task"), ("cand/0", "normal task")):
        assert f"{key} [{task}] running" in lines
    assert any(re.fullmatch(r"base/0 \[normal task\] done · reward 1 · \d+ turns · \d+ tokens · [\d.]+s", line) for line in lines)
    failed = next(line for line in lines if line.startswith("base/1 [failing task] failed"))
    assert "reward -" in failed and "ProviderError" in failed
    assert lines.index("base/0 [normal task] running") < lines.index("base: done")
    assert lines[-3:] == [
        "base: done; 1 done, 1 failed; mean reward 1.000",
        "cand: done; 1 done; mean reward 1.000",
        f"recording: {recording}",
    ]
    assert recording.stat().st_size > 0


@pytest.mark.parametrize("command", [[], ["attach"], ["replay"], ["open"], ["export"]], ids=["main", "attach", "replay", "open", "export"])
def test_every_command_has_help(command: list[str], tmp_path: Path) -> None:
    """Each form documents itself and exits 0 without starting anything; each that
    shows a session can run it without a screen."""
    done = run_cli(*command, "--help", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: " + " ".join(["tracewatch", *command]))
    assert ("--headless" in done.stdout) == (command != ["export"])
    assert not (tmp_path / "sessions").exists(), "help starts nothing"


def test_a_config_typo_exits_2_with_a_suggestion(tmp_path: Path) -> None:
    """A misspelt key names where it is and what was meant, and nothing starts."""
    config = write_config(tmp_path, [demo_variant("typo", ["normal"], max_concurent=2)])
    done = run_cli(str(config), "--headless", "--no-record", home=tmp_path / "home")
    assert done.returncode == 2
    assert "variants[0].max_concurent: unknown key 'max_concurent'; did you mean 'max_concurrent'?" in done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "home" / "sessions").exists(), "nothing may start on a bad config"
