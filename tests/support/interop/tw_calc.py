"""A small verifiers environment the interop tests serve: arithmetic tasks solved with
the built-in `bash` harness on the `subprocess` runtime.

verifiers loads plugins by import name, so this module must be importable in the
server process (`tests/support/interop` goes on its PYTHONPATH). It exports one `Taskset`
and one `Harness`, which makes this harness the taskset's default.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import verifiers.v1 as vf
from verifiers.v1.harnesses.bash import BashHarness
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

__all__ = ["CalcHarness", "CalcTaskset"]


class CalcData(vf.TaskData):
    expression: str
    answer: int


class CalcTask(vf.Task[CalcData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == str(self.data.answer))


class CalcConfig(vf.TasksetConfig):
    pass


class CalcTaskset(vf.Taskset[CalcTask, CalcConfig]):
    def load(self) -> list[CalcTask]:
        return [task(0, "17 * 23", 391)]


def task(idx: int, expression: str, answer: int, directives: str = "", task_id: str | None = None) -> CalcTask:
    """One task; `directives` (e.g. `tools=2 parallel=1`) script the fake model."""
    prompt = (
        "Use the bash tool to evaluate the arithmetic expression below, then reply "
        f"with just the number.\nExpression: {expression}"
    )
    if directives:
        prompt += f"\n[[fake: {directives}]]"
    data = CalcData(
        idx=idx,
        id=task_id or f"calc-{idx}",
        name=f"calc {expression}",
        prompt=prompt,
        system_prompt="You are a careful calculator.",
        expression=expression,
        answer=answer,
    )
    return CalcTask(data, vf.TaskConfig())


class CalcHarness(BashHarness):
    """The `bash` harness without its uv bootstrap: the bundled chat program is put
    where `Runtime.prepare_uv_script` looks for it and bound to this interpreter
    (which has the program's dependencies), so no download ever happens."""

    async def setup(self, runtime: vf.Runtime) -> None:
        data = CHAT_PROGRAM_SOURCE.encode()
        path = Path(runtime.scripts_dir) / f"{hashlib.sha256(data).hexdigest()}.py"
        if str(path) not in runtime._uv_interpreters:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            runtime._uv_interpreters[str(path)] = sys.executable
