"""A small local taskset for running the real `vf-eval` under tracewatch: three
arithmetic tasks of `tw_calc`, scripted for the fake model (one answers wrong, one
hangs until released when `TW_EVALSET_HANG` is set, takes `TW_EVALSET_TOOLS` tool turns
(2 unless set) and is `TW_EVALSET_PAD` characters larger each tool turn when that is set)."""

from __future__ import annotations

import os

import verifiers.v1 as vf
from tw_calc import CalcConfig, CalcHarness, CalcTask, task

__all__ = ["EvalSet", "CalcHarness"]


class EvalSet(vf.Taskset[CalcTask, CalcConfig]):
    def load(self) -> list[CalcTask]:
        hang = "hang=1" if os.environ.get("TW_EVALSET_HANG") else ""
        pad = f"pad={os.environ['TW_EVALSET_PAD']}" if os.environ.get("TW_EVALSET_PAD") else ""
        return [
            task(0, "17 * 23", 391),
            task(1, "1000 / 8 + 6", 131, "wrong=1"),
            task(2, "(120 + 37) * 3", 471, " ".join(filter(None, [f"tools={os.environ.get('TW_EVALSET_TOOLS', '2')}", hang, pad]))),
        ]
