"""Shared helpers for the supervision tests: real processes, polled with deadlines."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support.polling import wait_until
from tracewatch.core.supervision.child import SupervisedChild

HERE = Path(__file__).parent
PROGRAM = HERE / "child_program.py"
HOLDER = HERE / "child_holder.py"


def program(*flags: str) -> list[str]:
    return [sys.executable, str(PROGRAM), *flags]


def child_kwargs(tmp_path: Path, argv: list[str], **overrides) -> dict:
    kwargs = dict(
        argv=argv,
        cwd=str(tmp_path),
        env={"PATH": os.environ.get("PATH", os.defpath)},
        stdout_path=str(tmp_path / "captures" / "out.log"),
        stderr_path=str(tmp_path / "captures" / "err.log"),
        record_path=str(tmp_path / "captures" / "record.json"),
        deadline_seconds=60.0,
        supervisor_grace_seconds=0.5,
        label="test variant",
    )
    kwargs.update(overrides)
    return kwargs


def make_child(tmp_path: Path, argv: list[str], **overrides) -> SupervisedChild:
    return SupervisedChild(**child_kwargs(tmp_path, argv, **overrides))


def reported_pids(capture: Path, grandchildren: int = 0) -> dict[str, list[int]]:
    """Wait for the test program's `ready` and return the pids it printed, by role."""

    def read() -> dict[str, list[int]] | None:
        lines = capture.read_text().splitlines()
        if "ready" not in lines:
            return None
        pids: dict[str, list[int]] = {"child": [], "grandchild": [], "escapee": []}
        for line in lines:
            role, _, pid = line.partition(" ")
            if role in pids:
                pids[role].append(int(pid))
        return pids

    pids = wait_until(read, what=f"'ready' in {capture}")
    assert len(pids["grandchild"]) == grandchildren
    return pids
