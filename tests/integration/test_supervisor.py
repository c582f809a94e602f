"""tracewatch.core.supervision.supervisor with real processes and real signals: what stops the command,
how it escalates, and that nothing is left behind, even when the app is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.child_helpers import HOLDER, child_kwargs, program, reported_pids
from tests.support.polling import MARGIN, pid_gone, wait_until
from tracewatch.core.supervision.supervisor import START_FAILED_EXIT, argv_digest, group_alive

GRACE = 0.5


class Launched:
    """A supervisor started straight from its command line, this test holding the pipe."""

    def __init__(self, tmp_path: Path, argv: list[str], deadline: float = 60.0, grace: float = GRACE, on_parent_gone: str = "stop") -> None:
        self.grace = grace
        self.record_path = tmp_path / "record.json"
        self.stdout_path = tmp_path / "out.log"
        read_end, self.write_end = os.pipe()
        with open(self.stdout_path, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tracewatch.core.supervision.supervisor", "--parent-fd", str(read_end),
                 "--record", str(self.record_path), "--deadline-seconds", str(deadline),
                 "--grace-seconds", str(grace), "--on-parent-gone", on_parent_gone, "--", *argv],
                stdout=out,
                pass_fds=(read_end,),
                start_new_session=True,
            )  # fmt: skip
        os.close(read_end)

    def record(self) -> dict:
        return json.loads(self.record_path.read_text())

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=self.grace + MARGIN)
        finally:
            os.close(self.write_end)


def signals_sent(record: dict) -> list[str]:
    return [sent["signal"] for sent in record["signals"]]


def test_app_sigkilled_stops_child_and_grandchildren(tmp_path):
    kwargs = child_kwargs(tmp_path, program("--grandchildren", "2"), supervisor_grace_seconds=GRACE)
    holder = subprocess.Popen(
        [sys.executable, str(HOLDER), json.dumps(kwargs)], stdout=subprocess.PIPE
    )
    try:
        supervisor_pid = json.loads(holder.stdout.readline())["supervisor"]
        pids = reported_pids(Path(kwargs["stdout_path"]), grandchildren=2)
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    everyone = [supervisor_pid, *pids["child"], *pids["grandchild"]]
    wait_until(lambda: all(map(pid_gone, everyone)), GRACE + MARGIN, "every process to be gone")
    record = json.loads(Path(kwargs["record_path"]).read_text())
    assert record["state"] == "finished"
    assert record["reason"] == "parent_gone"
    assert record["supervisor_pid"] == supervisor_pid
    assert record["child_pid"] == pids["child"][0]
    assert signals_sent(record) == ["SIGTERM"]  # sleep and the default handler obey it


def test_deadline_stops_a_child_that_runs_too_long(tmp_path):
    run = Launched(tmp_path, program(), deadline=0.5)
    assert run.wait() == 128 + signal.SIGTERM
    record = run.record()
    assert record["reason"] == "deadline"
    assert record["signal"] == "SIGTERM" and record["exit_code"] is None
    assert signals_sent(record) == ["SIGTERM"]


def test_child_ignoring_sigterm_is_sigkilled_after_grace(tmp_path):
    run = Launched(tmp_path, program("--on-term", "ignore", "--grandchildren", "1"))
    pids = reported_pids(run.stdout_path, grandchildren=1)
    run.process.send_signal(signal.SIGTERM)
    assert run.wait() == 128 + signal.SIGKILL
    record = run.record()
    assert record["reason"] == "sigterm"
    assert signals_sent(record) == ["SIGTERM", "SIGKILL"]
    assert record["signal"] == "SIGKILL"
    wait_until(lambda: all(map(pid_gone, pids["child"] + pids["grandchild"])), MARGIN)


def test_closing_the_pipe_stops_a_child_that_exits_on_sigterm_without_sigkill(tmp_path):
    # the whole margin to exit: a loaded machine may not run the child's handler within GRACE
    run = Launched(tmp_path, program("--on-term", "exit130"), grace=MARGIN)
    reported_pids(run.stdout_path)
    os.close(run.write_end)
    assert run.process.wait(timeout=2 * MARGIN) == 130
    record = run.record()
    assert record["reason"] == "parent_gone"
    assert signals_sent(record) == ["SIGTERM"]
    assert record["exit_code"] == 130


def test_exit_code_passes_through_and_leftovers_are_stopped(tmp_path):
    run = Launched(tmp_path, program("--grandchildren", "1", "--exit", "3"))
    assert run.wait() == 3
    record = run.record()
    assert record["reason"] == "child_exited"
    assert record["argv_digest"] == argv_digest(program("--grandchildren", "1", "--exit", "3"))
    # the sleep left behind in the command's group is stopped, not orphaned
    assert signals_sent(record) == ["SIGTERM"]
    grandchild = reported_pids(run.stdout_path, grandchildren=1)["grandchild"][0]
    wait_until(lambda: pid_gone(grandchild), MARGIN)


def test_unstartable_program_is_recorded_and_exits_127(tmp_path):
    run = Launched(tmp_path, [str(tmp_path / "no-such-program")])
    assert run.wait() == START_FAILED_EXIT
    record = run.record()
    assert record["state"] == "start_failed"
    assert "no-such-program" in record["error"]
    assert record["child_pid"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.log", "record.json"]  # no temp left
    assert run.record_path.stat().st_mode & 0o777 == 0o600


def test_grandchild_that_left_the_group_is_stopped_when_the_app_goes(tmp_path):
    run = Launched(tmp_path, program("--escapees", "2"))
    pids = reported_pids(run.stdout_path)
    assert len(pids["escapee"]) == 2
    assert all(os.getpgid(pid) == pid for pid in pids["escapee"])  # setsid(): a group of its own
    os.close(run.write_end)
    assert run.process.wait(timeout=GRACE + MARGIN) == 128 + signal.SIGTERM
    record = run.record()
    assert record["subreaper"] is True
    wait_until(lambda: all(map(pid_gone, pids["escapee"])), MARGIN, "the escaped grandchildren to be gone")


def test_escapee_ignoring_sigterm_is_killed_after_the_command_exits(tmp_path):
    run = Launched(tmp_path, program("--on-term", "ignore", "--escapees", "1", "--exit", "0"))
    assert run.wait() == 0
    escapee = reported_pids(run.stdout_path)["escapee"]
    record = run.record()
    assert record["reason"] == "child_exited"
    assert signals_sent(record) == ["SIGTERM", "SIGKILL"]
    assert record["signals"][0]["inherited"] == escapee
    wait_until(lambda: all(map(pid_gone, escapee)), MARGIN, "the escaped grandchild to be gone")


def test_finish_without_the_app_runs_the_command_to_its_end(tmp_path):
    launched = Launched(tmp_path, [sys.executable, "-c", "import time; time.sleep(1.5); print('results written')"], on_parent_gone="finish")
    os.close(launched.write_end)  # the app is gone at once
    launched.write_end = os.open(os.devnull, os.O_RDONLY)  # what wait() closes
    assert launched.wait() == 0
    record = launched.record()
    assert record["reason"] == "child_exited" and record["exit_code"] == 0 and record["signals"] == []
    assert record["on_parent_gone"] == "finish" and record["parent_gone_at"] is not None
    assert "results written" in launched.stdout_path.read_text()


def test_finish_without_the_app_still_enforces_the_deadline(tmp_path):
    launched = Launched(tmp_path, [sys.executable, "-c", "import time; time.sleep(600)"], deadline=2.0, on_parent_gone="finish")
    os.close(launched.write_end)
    launched.write_end = os.open(os.devnull, os.O_RDONLY)
    assert launched.wait() == 128 + signal.SIGTERM
    record = launched.record()
    assert record["reason"] == "deadline" and record["parent_gone_at"] is not None
    assert signals_sent(record)[:1] == ["SIGTERM"] and not group_alive(record["child_pgid"])
