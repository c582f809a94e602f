"""prime-rl's orchestrator and trainer, played in-process over verifiers 0.4.0's own
objects, writing through `prime_rl_monitor.FileMonitor`: what a test follows.

Each rollout is a verifiers `Trace` that grows turn by turn; verifiers' own
`DeltaStreamer.diff` makes its wire deltas (a retry swaps in a fresh trace, and the
streamer discards the old one), which are buffered as prime-rl's dispatcher buffers its
live events (`pending` when dispatched, the dispatch identity on every delta,
`dispatched` after the first delta, `done` when retired) and written by `flush`. A
finished rollout becomes a verifiers `Episode`, stamped on arrival as prime-rl stamps
it (`info.kind`, `info.dispatch`, `info.arrival`, env, group, run) and logged with
`Episode.to_record()`. `ship` writes the orchestrator's annotations for a shipped
cohort (`stamp_batch`: effective, ship step, the advantage, and each branch's
advantages spread by verifiers' `Branch`) and the trainer's (full-length
`trainer_logprobs`, `entropies` and `is_masked` per branch, null where the loss mask is
off and at position 0).

`trainer_value(n, j)` is what the trainer says of node n's token j, so a test knows
what each node must carry after the fold without folding it itself.

`RunWriter` plays a whole scripted run on a thread (or in-line), so a test can follow it
as it is written.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers.v1.episode import WireEpisode
from verifiers.v1.graph import MessageNode
from verifiers.v1.serve.delta import DeltaStreamer
from verifiers.v1.trace import WireTrace

from tests.support.prime_rl_monitor import FileMonitor, make_update
from tests.support.tui_standin import fixture_episodes

ENVS = ("gsm8k", "math")


def trainer_metrics(step: int) -> dict[str, float]:
    """What the trainer logs at `step` (prime-rl's keys: the gradient's norm, the
    mismatch KL between trainer and sampler, the entropy, the throughput)."""
    return {
        "optim/grad_norm": round(0.1 * step, 4),
        "mismatch_kl/mean": round(0.002 * step * step, 4),
        "entropy/mean": round(1.5 - 0.1 * step, 4),
        "perf/throughput": 1000.0 + 250.0 * (step % 4),
    }


def trainer_value(node: int, token: int) -> float:
    """The trainer's logprob for node `node`'s token `token` (its entropy is minus it)."""
    return round(-(node + 1) / 10 - token / 1000, 4)


def _template() -> dict[str, Any]:
    trace = fixture_episodes()[0]["traces"][0]
    return {key: trace[key] for key in ("verifiers", "task", "agent")}


@dataclass
class Rollout:
    """One dispatched episode and its current attempt's trace."""

    kind: str
    env: str
    group: str
    task: str
    step: int
    dispatch_id: str
    fork: bool
    traces: list[Any]
    """The attempt streaming now, alone: what the streamer diffs."""
    streamer: DeltaStreamer
    reward: float = 0.0
    streamed: bool = False
    discarded: list[str] = field(default_factory=list)
    episode_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    index_row: dict[str, Any] | None = None
    started: float = 0.0

    @property
    def trace(self) -> Any:
        return self.traces[0]

    @property
    def dispatch(self) -> dict[str, Any]:
        return {"id": self.dispatch_id, "kind": self.kind, "env": self.env, "group": self.group, "task": self.task, "policy_version": self.step, "step": self.step, "started": self.started}


class Orchestrator:
    """Dispatches rollouts, grows them, lands them, ships them (see the module)."""

    def __init__(self, monitor: FileMonitor, trainer: FileMonitor | None = None, seed: int = 0, run: str = "run") -> None:
        self.monitor, self.trainer, self.run = monitor, trainer, run
        self.rng = random.Random(seed)
        self.events: list[dict[str, Any]] = []
        self.template = _template()
        self.lock = threading.Lock()

    def dispatch(self, kind: str, step: int, env: str, task: int, group: str | None = None, fork: bool = False) -> Rollout:
        trace = self._new_trace(task)
        traces: list[Any] = [trace]
        streamer = DeltaStreamer(lambda: list(traces), _never)
        rollout = Rollout(kind, env, group or str(uuid.uuid4()), f"task {task}", step, f"d-{uuid.uuid4().hex[:12]}", fork, traces, streamer, started=time.time())
        self.events.append({"pending": rollout.dispatch_id, "dispatch": rollout.dispatch})
        trace.timing.start = time.time()
        trace.timing.setup.start = time.time()
        self._diff(rollout)
        return rollout

    def _new_trace(self, task: int) -> Any:
        data = {**self.template["task"], "data": {**self.template["task"]["data"], "idx": task, "name": f"task {task}"}}
        return WireTrace.model_validate({"verifiers": self.template["verifiers"], "task": data, "agent": self.template["agent"]})

    def turn(self, rollout: Rollout) -> None:
        """One more turn: the first lays the root (system + user prompt); each later an
        assistant reply (scaffold + sampled tokens) and, but for the last, a tool result."""
        trace = rollout.trace
        nodes = trace.nodes
        if not nodes:
            trace.timing.setup.end = trace.timing.agent.start = time.time()
            nodes.append(_node(None, "user", "solve it", [1, 2, 3, 4], sampled=0))
        else:
            parent = len(nodes) - 1
            if nodes[parent].message.role == "assistant":
                nodes.append(_node(parent, "tool", "42", [7, 8, 9], sampled=0))
                parent += 1
            nodes.append(_node(parent, "assistant", f"step {len(nodes)}", [5, 6, 10 + len(nodes), 11 + len(nodes), 12], sampled=3))
            if rollout.fork and len(nodes) == 4:
                nodes.append(_node(parent, "assistant", "another way", [5, 6, 30, 31], sampled=2))
        self._diff(rollout)

    def retry(self, rollout: Rollout) -> None:
        """A retried attempt: a fresh trace; the streamer discards the old one."""
        rollout.discarded.append(rollout.trace.id)
        rollout.traces[:] = [self._new_trace(int(rollout.task.removeprefix("task ")))]
        rollout.trace.timing.start = time.time()
        self._diff(rollout)

    def _diff(self, rollout: Rollout) -> None:
        streamer = rollout.streamer
        for trace_id, delta, cursor in streamer.diff():
            self.events.append({"delta": delta, "dispatch": rollout.dispatch})
            if cursor is None:
                streamer.cursors.pop(trace_id, None)
            else:
                streamer.cursors[trace_id] = cursor
            if not rollout.streamed and not delta.get("discard"):
                rollout.streamed = True
                self.events.append({"dispatched": rollout.dispatch_id})

    def finish(self, rollout: Rollout, reward: float, arrival_step: int | None = None, retire_first: bool = True) -> Any:
        """Score, retire and land the rollout; its verifiers `Episode`. prime-rl deletes
        the live file and writes the record on two paths, in either order: with
        `retire_first` false the record is written first and the `done` event waits for
        the next `flush`."""
        trace = rollout.trace
        now = time.time()
        trace.timing.agent.end = trace.timing.finalize.start = trace.timing.finalize.end = trace.timing.scoring.start = now
        trace.record_reward("correct", reward)
        trace.stop("agent_completed")
        trace.is_completed = trace.ok = True
        trace.timing.scoring.end = time.time()
        self._diff(rollout)
        rollout.reward = reward
        self.events.append({"done": trace.id})
        if retire_first:
            self.flush()
        trace.info["kind"] = rollout.kind
        trace.info["dispatch"] = {"step": rollout.step, "time": trace.timing.start}
        trace.info["arrival"] = {"step": rollout.step if arrival_step is None else arrival_step, "time": time.time()}
        work = {"type": rollout.kind, "step": rollout.step, "policy": {"start": rollout.step, "end": rollout.step}}
        episode = WireEpisode.model_validate(
            {
                "id": rollout.episode_id,
                "env": {"id": "tw-env", "name": rollout.env},
                "task": trace.task.model_dump(mode="python"),
                "group": {"id": rollout.group},
                "run": {"type": "train", "id": self.run, "work": work},
                "ok": True,
                "traces": [trace.model_dump(mode="python")],
            }
        )
        (rollout.index_row,) = self.monitor.log_episodes([episode])
        return episode

    def flush(self) -> None:
        with self.lock:
            events, self.events = self.events, []
        if events:
            self.monitor.log_live(events)

    def ship(self, rollouts: list[Rollout], step: int, advantage: float = 0.5) -> None:
        """The cohort ships at `step`: the orchestrator's annotations, then the trainer's."""
        orchestrator, trainer = [], []
        for rollout in rollouts:
            trace = rollout.trace
            trace.info["advantage"] = advantage
            for node in trace.nodes:
                node.advantages = [advantage] * sum(node.mask) if any(node.mask) else None
            branches = {b.index: {"advantages": b.advantages} for b in trace.branches if b.trainable and b.advantages is not None}
            info = {"effective": True, "ship": {"step": step, "time": time.time()}, "advantage": advantage}
            orchestrator.append(make_update(trace.id, info=info, branches=branches))
            trainer.append(make_update(trace.id, branches={b.index: self._trainer_streams(trace, b) for b in trace.branches}))
        self.monitor.log_annotations(orchestrator)
        if self.trainer is not None:
            self.trainer.log_annotations(trainer)

    def _trainer_streams(self, trace: Any, branch: Any) -> dict[str, list[Any]]:
        logprobs: list[Any] = []
        masked: list[Any] = []
        for node in branch.nodes:
            n = next(i for i, held in enumerate(trace.nodes) if held is node)
            for j, sampled in enumerate(node.mask):
                logprobs.append(trainer_value(n, j) if sampled else None)
                masked.append(not sampled)
        logprobs[0], masked[0] = None, None
        return {"trainer_logprobs": logprobs, "entropies": [None if v is None else -v for v in logprobs], "is_masked": masked}


async def _never(delta: dict[str, Any]) -> None:
    raise AssertionError("the orchestrator diffs its streamers itself")


def _node(parent: int | None, role: str, content: str, tokens: list[int], sampled: int) -> Any:
    message: dict[str, Any] = {"role": role, "content": content}
    if role == "tool":
        message["tool_call_id"] = "call_1"
    mask = [False] * (len(tokens) - sampled) + [True] * sampled
    return MessageNode.model_validate(
        {"parent": parent, "message": message, "sampled": bool(sampled), "token_ids": tokens, "mask": mask, "logprobs": [-0.5 - i / 100 for i in range(sampled)]}
    )


@dataclass
class Script:
    """A run to play: `episodes` rollouts, `concurrent` at a time, `turns` each."""

    episodes: int = 24
    concurrent: int = 6
    turns: int = 3
    retry_every: int = 7
    """Every n-th rollout is retried once mid-way (its first trace discarded)."""
    fork_every: int = 5
    eval_every: int = 4
    """Every n-th rollout is an eval episode of the current step."""
    ship_every: int = 6
    """A training cohort ships after this many train episodes landed."""
    relaunch_after: int | None = None
    """Land this many, then start a new orchestrator process on the same folder."""
    pause: float = 0.0
    """Seconds between flushes, so a follower sees the run grow."""


class RunWriter:
    """Plays a `Script` into `out` (a thread with `start`, or in-line with `run`);
    `truth` is what was written, for the test to compare with what it read."""

    def __init__(self, out: Path, script: Script, chunk_bytes: int = 4096, frame_bytes: int = 1024, seed: int = 0) -> None:
        self.out, self.script, self.seed = out, script, seed
        self.chunk_bytes, self.frame_bytes = chunk_bytes, frame_bytes
        self.landed: list[Rollout] = []
        self.shipped: dict[str, int] = {}
        """Trace id -> the step its cohort shipped at."""
        self.discarded: set[str] = set()
        self.planned: dict[int, int] = {}
        """Eval episodes dispatched per step (the plan's entries for the eval env)."""
        self.metrics: list[tuple[str, int | None, dict[str, float]]] = []
        """(producer, step, values) of each metrics row, in the order written."""
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._thread: threading.Thread | None = None

    def _monitors(self) -> tuple[FileMonitor, FileMonitor]:
        kwargs = {"chunk_bytes": self.chunk_bytes, "frame_bytes": self.frame_bytes}
        return FileMonitor(self.out, "orchestrator", **kwargs), FileMonitor(self.out, "trainer", **kwargs)

    def start(self) -> RunWriter:
        self._thread = threading.Thread(target=self.run, name="prime-rl-writer", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float = 120.0) -> None:
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the writer did not finish"
        if self.error is not None:
            raise self.error

    def run(self) -> None:
        try:
            self._play()
        except BaseException as error:  # noqa: BLE001 - handed to the test by join
            self.error = error
        finally:
            self.done.set()

    def _play(self) -> None:
        script, rng = self.script, random.Random(self.seed)
        monitor, trainer = self._monitors()
        orchestrator = Orchestrator(monitor, trainer, self.seed)
        step, started, cohort = 0, 0, []
        running: list[tuple[Rollout, int]] = []
        while started < script.episodes or running:
            while started < script.episodes and len(running) < script.concurrent:
                kind = "eval" if started % script.eval_every == script.eval_every - 1 else "train"
                if kind == "eval":
                    self.planned[step] = self.planned.get(step, 0) + 1
                    monitor.log_eval_plan(ENVS[1], step, self.planned[step])
                rollout = orchestrator.dispatch(kind, step, ENVS[kind == "eval"], started, fork=started % script.fork_every == 1)
                running.append((rollout, started))
                started += 1
            rollout, number = running.pop(rng.randrange(len(running)))
            orchestrator.turn(rollout)
            turns = sum(1 for node in rollout.trace.nodes if node.message.role == "assistant")
            if number % script.retry_every == 3 and not rollout.discarded and turns == 1:
                orchestrator.retry(rollout)
                self.discarded.update(rollout.discarded)
                orchestrator.turn(rollout)
            if turns < script.turns:
                running.append((rollout, number))
            else:
                orchestrator.finish(rollout, reward=float(number % 3 == 0), arrival_step=step)
                self.landed.append(rollout)
                if rollout.kind == "train":
                    cohort.append(rollout)
                if len(cohort) >= script.ship_every:
                    step += 1
                    orchestrator.ship(cohort, step)
                    self.shipped.update({r.trace.id: step for r in cohort})
                    rows: list[tuple[FileMonitor, str, int | None, dict[str, float]]] = [
                        (monitor, "orchestrator", step, {"train/reward/mean": sum(r.reward for r in cohort) / len(cohort)}),
                        (trainer, "trainer", step, trainer_metrics(step)),
                        (monitor, "orchestrator", None, {"inference/agg/num_requests_running/mean": float(len(running))}),
                    ]
                    for logger, producer, at, values in rows:
                        logger.log_metrics(values, at)
                        self.metrics.append((producer, at, values))
                    cohort = []
                if script.relaunch_after is not None and len(self.landed) == script.relaunch_after:
                    orchestrator.flush()
                    monitor.finalize()
                    trainer.finalize()
                    monitor, trainer = self._monitors()
                    # the new process's dispatcher starts over: its live folder is cleared at its first flush
                    for r, _ in running:
                        self.discarded.add(r.trace.id)
                    running = []
                    orchestrator = Orchestrator(monitor, trainer, self.seed + 1)
            orchestrator.flush()
            if script.pause:
                time.sleep(script.pause)
        orchestrator.flush()
        monitor.finalize()
        trainer.finalize()
