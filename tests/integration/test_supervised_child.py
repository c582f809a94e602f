"""tracewatch.core.supervision.child.SupervisedChild and tracewatch.core.supervision.capture with real processes and signals."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import threading
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.child_helpers import make_child, program, reported_pids
from tests.support.polling import MARGIN, pid_gone, wait_until
from tracewatch.core.paths import private_dir
from tracewatch.core.supervision.capture import tail_lines
from tracewatch.core.supervision.child import ChildError


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict]] = []
        self.threads: set[str] = set()

    def __call__(self, kind: str, detail: dict) -> None:
        self.seen.append((kind, detail))
        self.threads.add(threading.current_thread().name)

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.seen]


def test_captures_are_private_and_start_with_provenance(tmp_path):
    argv = program("--exit", "0")
    child = make_child(tmp_path, argv)
    child.start()
    assert child.wait(MARGIN) == 0
    captures = tmp_path / "captures"
    assert captures.stat().st_mode & 0o777 == 0o700
    digest = hashlib.sha256("\0".join(argv).encode()).hexdigest()
    for stream in ("stdout", "stderr"):
        path = Path(getattr(child, f"{stream}_path"))
        assert path.stat().st_mode & 0o777 == 0o600
        first = path.read_text().splitlines()[0]
        assert re.fullmatch(
            rf"# tracewatch test_variant {stream}; argv-digest {digest}; started \S+\+00:00", first
        )
    outcome = child.outcome()
    assert outcome.status == "exited" and outcome.exit_code == 0 and outcome.reason == "child_exited"
    assert outcome.argv_digest == digest
    data = Path(child.stdout_path).read_bytes()
    assert (outcome.stdout.sha256, outcome.stdout.size) == (hashlib.sha256(data).hexdigest(), len(data))
    assert outcome.finished_at >= outcome.started_at and outcome.elapsed_seconds > 0
    assert not outcome.cancelled and not outcome.killed and outcome.signal is None


def test_planted_symlink_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    private_dir(tmp_path / "captures").joinpath("out.log").symlink_to(victim)
    child = make_child(tmp_path, program())
    with pytest.raises(ChildError, match=re.escape(str(child.stdout_path)) + ".*symlink"):
        child.start()
    assert child.pid is None
    assert victim.read_text() == "keep me\n"


def test_order_is_enforced(tmp_path):
    child = make_child(tmp_path, program())
    with pytest.raises(ChildError, match="not been started"):
        child.poll()
    child.start()
    try:
        with pytest.raises(ChildError, match="already called"):
            child.start()
        with pytest.raises(ChildError, match="still running"):
            child.outcome()
        with pytest.raises(ChildError, match="still running after 0.1s"):
            child.wait(0.1)
    finally:
        child.terminate(MARGIN)


def test_exit_130_after_terminate_is_cancelled_without_sigkill(tmp_path):
    # the whole margin to exit: a loaded machine may not run the child's handler within 0.5 s
    child = make_child(tmp_path, program("--on-term", "exit130", "--grandchildren", "1"), supervisor_grace_seconds=MARGIN)
    child.start()
    pids = reported_pids(Path(child.stdout_path), grandchildren=1)
    events = Events()
    worker = threading.Thread(target=child.terminate, args=(MARGIN, events), name="worker")
    worker.start()
    while worker.is_alive():  # the UI polling while a worker escalates
        child.poll()
    worker.join()
    assert events.kinds == ["sigterm", "exited"]
    outcome = child.outcome()
    assert events.seen[0][1] == {"grace_seconds": MARGIN, "kill_at": outcome.record["sigkill_due_at"]}
    assert events.seen[1][1] == {"exit_code": 130}
    assert events.threads == {"worker"}
    assert (outcome.status, outcome.exit_code, outcome.reason) == ("cancelled", 130, "sigterm")
    assert outcome.cancelled and not outcome.killed
    assert all(map(pid_gone, pids["child"] + pids["grandchild"]))


def test_child_ignoring_sigterm_is_killed_by_the_supervisor(tmp_path):
    child = make_child(tmp_path, program("--on-term", "ignore"), supervisor_grace_seconds=0.3)
    child.start()
    reported_pids(Path(child.stdout_path))
    events = Events()
    assert child.terminate(MARGIN, events) == 128 + signal.SIGKILL
    assert events.kinds == ["sigterm", "sigkill", "exited"]
    assert events.seen[1][1] == {"by": "supervisor", "grace_seconds": 0.3}
    outcome = child.outcome()
    assert outcome.status == "killed" and outcome.killed and outcome.signal == "SIGKILL"
    assert [sent["signal"] for sent in outcome.record["signals"]] == ["SIGTERM", "SIGKILL"]


def test_the_server_gets_its_whole_grace_and_the_countdown_ends_at_sigkill(tmp_path):
    child = make_child(tmp_path, program("--on-term", "ignore"), supervisor_grace_seconds=1.5)
    child.start()
    reported_pids(Path(child.stdout_path))
    events = Events()
    child.terminate(on_event=events)  # the app's default wait outlasts the supervisor's grace
    assert events.kinds == ["sigterm", "sigkill", "exited"]
    assert events.seen[1][1]["by"] == "supervisor"
    record = child.outcome().record
    term, kill = (datetime.fromisoformat(sent["at"]).timestamp() for sent in record["signals"])
    assert kill - term >= 1.5
    kill_at = events.seen[0][1]["kill_at"]
    assert kill_at == record["sigkill_due_at"] and kill >= kill_at


def test_app_grace_shorter_than_supervisor_kills_both_groups(tmp_path):
    child = make_child(
        tmp_path, program("--on-term", "ignore", "--grandchildren", "1"), supervisor_grace_seconds=60
    )
    child.start()
    pids = reported_pids(Path(child.stdout_path), grandchildren=1)
    events = Events()
    child.terminate(0.2, events)
    assert events.kinds == ["sigterm", "sigkill", "exited"]
    assert events.seen[1][1] == {"by": "app"}
    outcome = child.outcome()
    assert outcome.status == "killed" and outcome.signal == "SIGKILL" and outcome.exit_code == 137
    wait_until(lambda: all(map(pid_gone, pids["child"] + pids["grandchild"])), MARGIN)


def test_kill_during_terminate_is_reported_by_the_escalating_thread(tmp_path):
    child = make_child(
        tmp_path, program("--on-term", "ignore", "--grandchildren", "1"), supervisor_grace_seconds=60
    )
    child.start()
    pids = reported_pids(Path(child.stdout_path), grandchildren=1)
    events = Events()
    worker = threading.Thread(target=child.terminate, args=(60, events), name="worker")
    worker.start()
    wait_until(lambda: events.kinds == ["sigterm"], what="SIGTERM to be sent")
    assert child.kill()  # a second cancel
    worker.join(MARGIN)
    assert not worker.is_alive()
    assert events.kinds == ["sigterm", "sigkill", "exited"]
    assert events.seen[1][1] == {"by": "app"}
    assert not child.kill()
    assert child.outcome().status == "killed"
    wait_until(lambda: all(map(pid_gone, pids["child"] + pids["grandchild"])), MARGIN)


def test_deadline_reads_as_failed_not_cancelled(tmp_path):
    child = make_child(tmp_path, program(), deadline_seconds=0.3)
    child.start()
    assert child.wait(MARGIN) == 128 + signal.SIGTERM
    outcome = child.outcome()
    assert (outcome.status, outcome.reason, outcome.signal) == ("failed", "deadline", "SIGTERM")


def test_nonzero_exit_is_failed_and_env_reaches_the_child(tmp_path):
    child = make_child(
        tmp_path,
        program("--print-env", "TW_SECRET", "--exit", "2"),
        env={"PATH": os.environ["PATH"], "TW_SECRET": "s3cret"},
    )
    child.start()
    assert child.wait(MARGIN) == 2
    outcome = child.outcome()
    assert outcome.status == "failed" and not outcome.cancelled
    assert "env s3cret" in tail_lines(child.stdout_path, 10)
    assert "s3cret" not in repr(outcome.record)


def test_relative_paths_mean_the_same_files_to_app_and_supervisor(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    child = make_child(
        tmp_path, program("--exit", "0"), cwd="work", stdout_path="cap/out.log",
        stderr_path="cap/err.log", record_path="cap/record.json",
    )  # fmt: skip
    child.start()
    child.wait(MARGIN)
    assert child.outcome().record["reason"] == "child_exited"
    assert not (tmp_path / "work" / "cap").exists()


def test_terminate_after_exit_is_not_a_cancel(tmp_path):
    child = make_child(tmp_path, program("--exit", "1"))
    child.start()
    child.wait(MARGIN)
    events = Events()
    assert child.terminate(MARGIN, events) == 1
    assert events.kinds == ["exited"]
    assert child.outcome().status == "failed"


def test_missing_program_fails_before_launching_anything(tmp_path):
    child = make_child(tmp_path, ["no-such-program-tracewatch"])
    with pytest.raises(ChildError, match="no-such-program-tracewatch.*not an executable"):
        child.start()
    assert child.pid is None


def test_program_the_supervisor_cannot_run_is_a_clear_error(tmp_path):
    script = tmp_path / "broken.sh"  # passes the pre-check, fails at exec
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    child = make_child(tmp_path, [str(script)])
    with pytest.raises(ChildError, match="cannot start .*broken.sh"):
        child.start()
    assert child.pid is not None and pid_gone(child.pid)
    with pytest.raises(ChildError, match="already called"):
        child.start()


def test_context_manager_terminates_a_running_child(tmp_path):
    with make_child(tmp_path, program()) as child:
        pids = reported_pids(Path(child.stdout_path))
    assert child.poll() == 128 + signal.SIGTERM
    assert child.outcome().status == "cancelled"
    assert pid_gone(pids["child"][0])


def test_tail_lines_reads_only_the_end(tmp_path):
    path = tmp_path / "big.log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(100_000)) + b"partial")
    assert tail_lines(path, 3) == ["line 99998", "line 99999", "partial"]
    window = tail_lines(path, 10_000, max_bytes=100)
    assert window[-1] == "partial" and len(window) < 15
    assert all(re.fullmatch(r"line \d+", line) for line in window[:-1])  # no cut line
    assert tail_lines(path, 0) == []


def test_private_dir_creates_and_tightens(tmp_path):
    created = private_dir(tmp_path / "a" / "b")
    assert created.stat().st_mode & 0o777 == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    assert private_dir(loose).stat().st_mode & 0o777 == 0o700
    (tmp_path / "link").symlink_to(loose)
    with pytest.raises(OSError, match="symlink"):
        private_dir(tmp_path / "link")
