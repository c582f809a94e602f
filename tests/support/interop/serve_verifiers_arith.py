"""A tiny verifiers taskset for tests/integration/test_serve_verifiers.py: three arithmetic tasks
with a task-specific field (`answer`), loaded by import name as verifiers loads any
taskset plugin."""

import verifiers.v1 as vf

__all__ = ["ArithTaskset"]


class ArithData(vf.TaskData):
    answer: int


class ArithTask(vf.Task[ArithData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return 0.0


class ArithConfig(vf.TasksetConfig):
    num_tasks: int = 3


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            data = ArithData(id=f"arith-{i}", name=f"{i} + {i}", prompt=f"What is {i} + {i}?", answer=2 * i)
            yield ArithTask(data, self.config.task)
