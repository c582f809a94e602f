"""Live traces as plain dicts, shaped field for field like a dumped verifiers 0.4.0
`Trace`, so the deltas the streamer cuts from them read exactly like a real server's.

The rollout mutates a `LiveTrace` and calls `notify`, as verifiers' rollout and
interception proxy do; the streamer decides what crossed the wire.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from tracewatch.core.wire.protocol import AGENT_PARTS, LIST_FIELDS, PHASES

TRACE_VERSION = 1
VERIFIERS = {"version": "0.4.0", "commit": None}


def new_timing() -> dict[str, Any]:
    timing: dict[str, Any] = {"start": time.time(), **{phase: {"start": 0.0, "end": 0.0} for phase in PHASES}}
    timing["agent"].update({part: {"duration": 0.0} for part in AGENT_PARTS})
    return timing


def node(
    parent: int | None,
    message: dict[str, Any],
    *,
    sampled: bool = False,
    tools: list[dict[str, Any]] | None = None,
    tokens: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `MessageNode` dump; `tools` only on a root, `tokens` (its token arrays:
    `token_ids`, `mask`, `is_content`, `logprobs`, and any a trainer adds) only when
    the rollout is tokenized, as training rollouts are."""
    return {
        "parent": parent,
        **({"tools": tools} if tools else {}),
        "semantic_parents": [],
        "message": message,
        "sampled": sampled,
        "timestamp": time.time(),
        "token_ids": [],
        "mask": [],
        "is_content": [],
        "logprobs": [],
        "advantages": None,
        "reference_logprobs": None,
        "trainer_logprobs": None,
        "entropies": None,
        "loss_weights": None,
        "routed_experts": None,
        "sampling_mask": None,
        **(tokens or {}),
    }


def error(kind: str, message: str, status_code: int | None = None, traceback: str | None = None) -> dict[str, Any]:
    return {"type": kind, "message": message, "status_code": status_code, "traceback": traceback}


class LiveTrace:
    """One agent's trace: `header` is sent once, `lists` are append-only, `scalars`
    are re-sent whole when they change, `pending` is the preview of the request in
    flight that no node holds yet."""

    def __init__(self, task: dict[str, Any], agent: dict[str, Any]) -> None:
        self.id = uuid.uuid4().hex
        self.header = {"version": TRACE_VERSION, "id": self.id, "verifiers": VERIFIERS, "task": task}
        self.scalars: dict[str, Any] = {
            "agent": agent,
            "tools": [],
            "mm_token_type_id_map": {},
            "rewards": {},
            "metrics": {},
            "info": {},
            "root_reply": None,
            "is_completed": False,
            "ok": False,
            "stop_condition": None,
            "is_timeout": False,
            "timing": new_timing(),
            "num_input_tokens": 0,
            "num_output_tokens": 0,
            "num_total_tokens": 0,
        }
        self.lists: dict[str, list[dict[str, Any]]] = {field: [] for field in LIST_FIELDS}
        self.pending: list[dict[str, Any]] = []
        self._on_change: Callable[[LiveTrace], None] | None = None

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return self.lists["nodes"]

    @property
    def calls(self) -> list[dict[str, Any]]:
        return self.lists["calls"]

    @property
    def timing(self) -> dict[str, Any]:
        timing: dict[str, Any] = self.scalars["timing"]
        return timing

    def watch(self, on_change: Callable[[LiveTrace], None]) -> None:
        self._on_change = on_change

    def notify(self) -> None:
        if self._on_change is not None:
            self._on_change(self)

    def mark(self, phase: str, edge: str) -> None:
        """Stamp a phase edge now; an `end` also starts the phase after it."""
        now = time.time()
        self.timing[phase][edge] = now
        following = PHASES.index(phase) + 1
        if edge == "end" and following < len(PHASES) and phase != "agent":
            self.timing[PHASES[following]]["start"] = now

    def preview(self, messages: list[dict[str, Any]]) -> None:
        self.pending = list(messages)
        self.notify()

    def commit(self, inputs: list[dict[str, Any]], reply: dict[str, Any], call: dict[str, Any]) -> None:
        """A turn lands whole: its input nodes, the sampled node, its call record."""
        self.nodes.extend(inputs)
        self.nodes.append(reply)
        call["node"] = len(self.nodes) - 1
        self.calls.append(call)
        if not self.scalars["tools"] and self.nodes[0].get("tools"):
            self.scalars["tools"] = self.nodes[0]["tools"]
        self._count_tokens()
        self.pending = []
        self.notify()

    def abandon(self, call: dict[str, Any]) -> None:
        """A model call that committed nothing: its record, and the preview cleared."""
        self.calls.append(call)
        self.pending = []
        self.notify()

    def fail(self, err: dict[str, Any], stop_condition: str) -> None:
        self.lists["errors"].append(err)
        self.scalars.update(ok=False, is_completed=True)
        self.scalars["stop_condition"] = self.scalars["stop_condition"] or stop_condition

    def split_agent_time(self) -> None:
        agent = self.timing["agent"]
        span = max(0.0, agent["end"] - agent["start"])
        model = min(span, sum(call["time"]["end"] - call["time"]["start"] for call in self.calls))
        agent["model"]["duration"] = model
        agent["harness"]["duration"] = span - model

    def _count_tokens(self) -> None:
        # verifiers' accounting: each call's prompt beyond the previous sequence is new input
        fed, out, previous = 0, 0, 0
        for call in self.calls:
            usage = call["usage"]
            if usage is None:
                continue
            fed += max(0, usage["prompt_tokens"] - previous)
            out += usage["completion_tokens"]
            previous = usage["prompt_tokens"] + usage["completion_tokens"]
        self.scalars.update(num_input_tokens=fed, num_output_tokens=out, num_total_tokens=fed + out)

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "nodes": len(self.nodes), "calls": len(self.calls)}


class LiveEpisode:
    """The run's live set of traces (what the streamer diffs) and its standing."""

    def __init__(self, task: dict[str, Any], env_id: str) -> None:
        self.id = uuid.uuid4().hex
        self.task = task
        self.env = {"id": env_id, "name": None}
        self.traces: list[LiveTrace] = []
        self.errors: list[dict[str, Any]] = []

    def discard(self, trace: LiveTrace) -> None:
        """A retried attempt abandons its trace; the next flush sends `discard`."""
        self.traces.remove(trace)
        trace.notify()

    def head(self) -> dict[str, Any]:
        """The episode without its traces, as the run reply carries it."""
        totals = {
            field: sum(trace.scalars[field] for trace in self.traces)
            for field in ("num_input_tokens", "num_output_tokens", "num_total_tokens")
        }
        return {
            "id": self.id,
            "env": self.env,
            "task": self.task,
            "group": None,
            "run": None,
            "ok": bool(self.traces) and all(trace.scalars["ok"] for trace in self.traces),
            "is_timeout": False,
            "errors": self.errors,
            **totals,
        }
