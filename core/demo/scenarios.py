"""The rollouts the demo plays, one per scenario: what a watcher should be able to see
(a normal run, a slow one, a provider failure, a retried model call, a stuck call, an
abandoned attempt, two agents in one episode, a training-shaped run with every token's
streams, and a tokenized run for load).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracewatch.core.demo.agent import TOOL_SECONDS, Agent, Pace, Tokens
from tracewatch.core.demo.content import (
    HARNESS_PROMPTS,
    PROVIDER_ERRORS,
    SANDBOX_CRASH,
    TOOLS,
    judge_steps,
)
from tracewatch.core.demo.tasks import DemoTask
from tracewatch.core.demo.trace import LiveEpisode, LiveTrace, error
from tracewatch.core.demo.training import TrainingTokens

SLOW_MODEL_SECONDS = (8.0, 20.0)
RETRY_BACKOFF = (0.5, 1.5)


@dataclass
class Run:
    """What one run plays with: its task, episode, pacing and request settings."""

    task: DemoTask
    episode: LiveEpisode
    pace: Pace
    rng: random.Random
    watch: Callable[[LiveTrace], None]
    model: str
    client: dict[str, Any]
    sampling: dict[str, Any]

    def agent(self, name: str = "solver", kind: str | None = None, prompt: str | None = None,
              trainable: bool = True, **options: Any) -> Agent:
        """Mint a trace for one agent, add it to the live set and start streaming it."""
        kind = kind or self.task.problem.kind
        system = HARNESS_PROMPTS[kind] + ("" if kind == "judge" else "\n\n" + self.task.system_prompt)
        trace = LiveTrace(self.task.record, self.agent_record(name, trainable))
        self.episode.traces.append(trace)
        self.watch(trace)
        return Agent(trace, self.pace, system=system, prompt=prompt or self.task.prompt, tools=TOOLS[kind], **options)

    def agent_record(self, name: str, trainable: bool) -> dict[str, Any]:
        return {
            "config": {
                "harness": {"id": "demo-harness", "env": {}, "forward_env": [], "mcp_header_env": {},
                            "tool_timeout": 600.0, "disabled_tools": None, "skills": [], "edit": True,
                            "search": False, "compaction": {"summarize_at_tokens": None}},
                "runtime": {"type": "subprocess"},
                "model": self.model,
                "client": self.client,
                "sampling": self.sampling,
                "max_turns": 32,
                "max_input_tokens": None,
                "max_output_tokens": None,
                "max_total_tokens": None,
                "timeout": {"setup": 60.0, "rollout": 900.0, "finalize": None, "scoring": 30.0},
                "retries": {"max_retries": 1, "rules": []},
                "network_notice": True,
            },
            "runtime": None,
            "name": name,
            "trainable": trainable,
        }


CORRECT = {"correct": (1.0, 1.0)}


async def normal(run: Run, **options: Any) -> None:
    agent = run.agent(**options)
    await agent.start()
    for step in run.task.problem.script(run.rng):
        await agent.step(step)
    await agent.end_agent()
    await agent.finish(CORRECT, agent.metrics)


async def slow(run: Run) -> None:
    await normal(run, model_seconds=SLOW_MODEL_SECONDS)


async def failing(run: Run) -> None:
    """The provider refuses the second call: the run stops as `provider_error`."""
    agent = run.agent()
    await agent.start()
    await agent.step(run.task.problem.script(run.rng)[0])
    await agent.fail(await agent.provider_error(PROVIDER_ERRORS["context"]), "provider_error")


async def transient(run: Run) -> None:
    """One call fails with a retryable error; the harness retries it and goes on."""
    agent = run.agent()
    await agent.start()
    steps = run.task.problem.script(run.rng)
    flaky = run.rng.randrange(min(2, len(steps)))
    for index, step in enumerate(steps):
        if index == flaky:
            await agent.provider_error(PROVIDER_ERRORS[run.rng.choice(("overloaded", "rate"))])
            await run.pace.wait(*RETRY_BACKOFF)
        await agent.step(step)
    await agent.end_agent()
    await agent.finish(CORRECT, agent.metrics)


async def stuck(run: Run) -> None:
    """The second model call never answers; only a cancel ends the run."""
    agent = run.agent()
    await agent.start()
    await agent.step(run.task.problem.script(run.rng)[0])
    await agent.hang()


async def retried(run: Run) -> None:
    """The first attempt's sandbox dies mid-tool; the attempt's trace is discarded,
    its error kept on the episode, and a fresh attempt runs to the end."""
    agent = run.agent()
    await agent.start()
    first = run.task.problem.script(run.rng)[0]
    started = agent.request()
    await run.pace.wait(*agent.model_seconds)
    agent.respond(first, started)
    await run.pace.wait(*TOOL_SECONDS)
    message, traceback = SANDBOX_CRASH
    crash = error("SandboxError", message, None, traceback)
    await agent.fail(crash, "sandbox_error")
    await run.pace.wait(*RETRY_BACKOFF)
    run.episode.errors.append(crash)
    run.episode.discard(agent.trace)
    await normal(run)


async def multi_agent(run: Run) -> None:
    """A solver answers, then a judge (untrained) grades it; both are scored."""
    solver = run.agent("solver")
    await solver.start()
    for step in run.task.problem.script(run.rng):
        await solver.step(step)
    await solver.end_agent()
    solver.trace.notify()
    prompt, steps = judge_steps(run.task.problem, solver.last_reply)
    judge = run.agent("judge", kind="judge", prompt=prompt, trainable=False)
    await judge.start()
    for step in steps:
        await judge.step(step)
    await judge.end_agent()
    await solver.finish({"correct": (1.0, 1.0), "judge_approved": (1.0, 0.5)}, solver.metrics)
    await judge.finish({"agreement": (1.0, 0.0)}, judge.metrics)


async def training(run: Run) -> None:
    """A normal run whose nodes carry what a trainer sees: tokens from the demo's
    tokenizer, the mask, logprobs, and from its second turn the trainer's streams."""
    await normal(run, tokens=TrainingTokens(run.rng))


async def scale(run: Run) -> None:
    """A long tokenized rollout with no waits: `turns` tool turns, `tokens` per node."""
    tokens = Tokens(run.rng, run.task.tokens)
    agent = run.agent(tokens=tokens)
    await agent.start()
    steps = run.task.problem.script(run.rng)
    tool_steps = [step for step in steps if step.runs] or steps
    for turn in range(run.task.turns):
        await agent.step(tool_steps[turn % len(tool_steps)])
    await agent.step(steps[-1])
    await agent.end_agent()
    await agent.finish(CORRECT, agent.metrics)


PLAYS = {
    "normal": normal,
    "slow": slow,
    "failing": failing,
    "transient": transient,
    "stuck": stuck,
    "retried": retried,
    "multi-agent": multi_agent,
    "training": training,
    "scale": scale,
}


async def play(run: Run) -> None:
    await PLAYS[run.task.scenario](run)
