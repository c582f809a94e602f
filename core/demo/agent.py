"""One demo agent playing a script onto its live trace, the way verifiers' rollout and
interception proxy drive a real one: phase spans, a `pending` preview before each model
call, the turn committed whole with its call record, tools run between turns.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tracewatch.core.demo.content import Step, ToolRun
from tracewatch.core.demo.trace import LiveTrace, error, node

MODEL_SECONDS = (1.0, 4.0)
TOOL_SECONDS = (0.3, 2.0)


@dataclass
class Pace:
    """Waits scaled by `speed`; with no speed (scale mode) a wait only lets the socket
    take what is queued (`drain`), so the rollout runs as fast as deltas leave."""

    rng: random.Random
    speed: float | None
    drain: Callable[[], Awaitable[None]]

    async def wait(self, low: float, high: float) -> float:
        seconds = self.rng.uniform(low, high)
        if self.speed is None:
            await self.drain()
        else:
            await asyncio.sleep(seconds / self.speed)
        return seconds


class Tokens:
    """Token spans for training-style rollouts: every node gets `length` token ids, a
    mask (an assistant's completion after a short scaffold), content flags and logprobs
    for the sampled tokens. Slices of one seeded pool keep it cheap at scale."""

    SCAFFOLD = 3

    def __init__(self, rng: random.Random, length: int) -> None:
        self.length = length
        self._ids = [rng.randrange(150_000) for _ in range(2 * length)]
        self._logprobs = [round(-rng.expovariate(6.0), 4) for _ in range(2 * length)]
        self._offset = 0

    def span(self, message: dict[str, Any], sampled: bool) -> dict[str, Any]:
        start = self._offset = (self._offset + 7919) % max(1, self.length)
        ids = self._ids[start : start + self.length]
        scaffold = min(self.SCAFFOLD, len(ids))
        content = [False] * scaffold + [True] * (len(ids) - scaffold)
        if not sampled:
            return {"token_ids": ids, "mask": [False] * len(ids), "is_content": content, "logprobs": []}
        logprobs = self._logprobs[start : start + len(ids) - scaffold]
        return {"token_ids": ids, "mask": content, "is_content": content[:], "logprobs": logprobs}


class Tokenizing(Protocol):
    """What tokenizes a node's message: its token arrays (`node`'s `tokens`)."""

    def span(self, message: dict[str, Any], sampled: bool) -> dict[str, Any]: ...


def estimate(message: dict[str, Any]) -> int:
    """Roughly what a tokenizer would count: four characters a token."""
    text = (message.get("content") or "") + (message.get("reasoning_content") or "")
    text += "".join(call["arguments"] for call in message.get("tool_calls") or [])
    return 4 + len(text) // 4


class Agent:
    def __init__(
        self,
        trace: LiveTrace,
        pace: Pace,
        *,
        system: str,
        prompt: str,
        tools: list[dict[str, Any]],
        model_seconds: tuple[float, float] = MODEL_SECONDS,
        tokens: Tokenizing | None = None,
    ) -> None:
        self.trace = trace
        self.pace = pace
        self.tools = tools
        self.model_seconds = model_seconds
        self.tokens = tokens
        self.unsent = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        self.context = len(json.dumps(tools)) // 4
        self.turn = 0
        self.pending_calls: list[dict[str, Any]] = []
        self.last_reply = ""

    @property
    def agent_config(self) -> dict[str, Any]:
        config: dict[str, Any] = self.trace.scalars["agent"]["config"]
        return config

    async def start(self) -> None:
        """Boot the box, then set up the task and harness."""
        self.trace.mark("boot", "start")
        self.trace.notify()
        await self.pace.wait(0.5, 1.5)
        self.trace.scalars["agent"]["runtime"] = {
            "id": f"/var/lib/verifiers/runtimes/subprocess/{self.trace.id}",
            "borrowed": False,
            "type": "subprocess",
        }
        self.trace.mark("boot", "end")
        self.trace.notify()
        await self.pace.wait(0.8, 2.5)
        self.trace.mark("setup", "end")
        self.trace.notify()
        await self.pace.wait(0.2, 0.8)  # the harness starts before its first request

    async def step(self, step: Step) -> None:
        """One model call that commits, then its tools."""
        started = self.request()
        await self.pace.wait(*self.model_seconds)
        self.respond(step, started)
        if step.runs:
            await self.run_tools(step.runs)

    def request(self) -> float:
        """The harness sends the turn: watchers see its new messages as `pending`."""
        self.trace.preview(self.unsent)
        return time.time()

    async def hang(self) -> None:
        """A model call that never answers: only a cancel ends it."""
        self.request()
        await asyncio.get_running_loop().create_future()

    async def provider_error(self, kind: tuple[int, str]) -> dict[str, Any]:
        """A model call the provider refused: a call record with no node, the
        preview cleared (the harness may retry it)."""
        started = self.request()
        await self.pace.wait(0.2, 1.0)
        status, message = kind
        err = error("ProviderError", message, status)
        self.trace.abandon(self.call(started, None, err))
        return err

    def respond(self, step: Step, started: float) -> None:
        self.turn += 1
        calls = [
            {"id": f"call_{self.turn}_{i}", "type": "function", "name": run.name, "namespace": None,
             "arguments": run.json_arguments}
            for i, run in enumerate(step.runs)
        ]
        reply = {
            "role": "assistant",
            "content": step.text,
            "reasoning_content": step.reasoning,
            "tool_calls": calls or None,
            "provider_state": None,
        }
        base = len(self.trace.nodes)
        inputs = [self.node(message, base + i - 1, sampled=False) for i, message in enumerate(self.unsent)]
        prompt_tokens = self.context + sum(self.count(n) for n in inputs)
        answer = self.node(reply, base + len(inputs) - 1, sampled=True)
        completion = self.count(answer)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "cached_input_tokens": None,
            "reasoning_tokens": estimate({"content": step.reasoning}) if step.reasoning else None,
            "cost": None,
        }
        self.context = prompt_tokens + completion
        self.trace.commit(inputs, answer, self.call(started, usage, None, "tool_calls" if calls else "stop"))
        self.unsent = []
        self.pending_calls = calls
        self.last_reply = step.text

    async def run_tools(self, runs: tuple[ToolRun, ...]) -> None:
        """Parallel calls take as long as the slowest; the harness holds their results
        until the next request."""
        await asyncio.gather(*(self.pace.wait(*TOOL_SECONDS) for _ in runs))
        self.unsent = [
            {"role": "tool", "tool_call_id": call["id"], "content": run.output, "name": run.name}
            for call, run in zip(self.pending_calls, runs, strict=True)
        ]

    def node(self, message: dict[str, Any], parent: int, *, sampled: bool) -> dict[str, Any]:
        root = parent < 0
        return node(
            None if root else parent,
            message,
            sampled=sampled,
            tools=self.tools if root else None,
            tokens=self.tokens.span(message, sampled) if self.tokens else None,
        )

    def count(self, built: dict[str, Any]) -> int:
        return len(built["token_ids"]) or estimate(built["message"])

    def call(self, started: float, usage: dict[str, Any] | None, err: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        return {
            "node": None,
            "model": self.agent_config["model"],
            "sampling": self.agent_config["sampling"],
            "endpoint": "/chat/completions",
            "finish_reason": finish,
            "usage": usage,
            "time": {"start": started, "end": time.time()},
            "error": err,
            "policy": None,
            "acp": None,
        }

    async def end_agent(self) -> None:
        """The harness exits after its last turn (or its failure); the agent span ends."""
        await self.pace.wait(0.2, 0.6)
        self.trace.mark("agent", "end")

    async def finish(self, rewards: dict[str, tuple[float, float]], metrics: dict[str, float]) -> None:
        """Finalize and score: rewards and metrics are seeded with nulls, then filled."""
        trace = self.trace
        trace.scalars.update(is_completed=True, stop_condition="agent_completed")
        trace.mark("finalize", "start")
        trace.notify()
        await self.pace.wait(0.3, 1.0)
        trace.mark("finalize", "end")
        trace.scalars["rewards"] = dict.fromkeys(rewards)
        trace.scalars["metrics"] = dict.fromkeys(metrics)
        trace.notify()
        await self.pace.wait(0.5, 1.5)
        trace.scalars["rewards"] = {name: {"score": s, "weight": w} for name, (s, w) in rewards.items()}
        trace.scalars["metrics"] = {name: float(value) for name, value in metrics.items()}
        trace.scalars["ok"] = True
        trace.split_agent_time()
        trace.mark("scoring", "end")
        trace.notify()

    async def fail(self, err: dict[str, Any], stop_condition: str) -> None:
        """The error that ends the agent: recorded, agent span closed, no scoring."""
        await self.end_agent()
        self.trace.fail(err, stop_condition)
        self.trace.split_agent_time()
        self.trace.notify()

    @property
    def metrics(self) -> dict[str, float]:
        return {
            "model_turns": self.turn,
            "tool_results": sum(1 for n in self.trace.nodes if n["message"]["role"] == "tool"),
        }
