"""End to end at training scale: the real app, headless under `run_test`, attached to a
local source that streams the demo's `scale` rollouts at socket speed.

First the demo server plays the rollouts once and every frame is kept; then, for each
client, a fresh source process replays those frames as fast as the socket takes them
(one frame per live run per round, so runs interleave as on a busy server). Each
client runs in its own process, so peak memory is its own:

- bare: a pyzmq DEALER and `msgpack.unpackb` of every frame, nothing kept: the floor
  any client on this machine and this stream stands on;
- verifiers 0.4.0's `EnvClient` (the baseline: decode, assemble, type the episode);
- ours headless: engine, store and recorder, no screen;
- the app: the same plus the screen, with Down/Up pressed every 100 ms while the
  stream lands, then the same keys once everything has landed (idle).

Reported: deltas/s (against verifiers' and against the bare floor), the client's CPU
seconds, keypress-to-repaint latency p50/p95/max
(under load and idle), repaints/s, table staleness (a delta's arrival to its row being
drawn, rows on screen), peak RSS growth / bytes received and the RSS growth once the
stream has ended (finished rollouts may have left memory: `tracewatch.core.recordings.eviction`),
the longest GC pause (wall time) and the most CPU a collection took. On a loaded box
read the CPU columns: a client's CPU per delta, and the bare loop's CPU over its own
(wall time there is mostly waiting for a core); `--rounds N` measures every client N
times in turn, each round with its load, and prints the CPU ratios of every round.

    python -m bench.live [--rollouts 256 --turns 200 --tokens 100 --concurrent 64]
                         [--clients bare,verifiers,headless,app] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import zmq

from tracewatch.core.ports import free_address
from tracewatch.core.session.phases import percentile
from tracewatch.core.wire.protocol import (
    ClientConfig,
    HealthRequest,
    RunRequest,
    SamplingConfig,
    request_payload,
)

ROOT = Path(__file__).resolve().parent.parent
KEY_EVERY = 0.1
LOST_KEY = 5.0
"""A key press not answered on screen within this long counts as this long."""
IDLE_KEYS = 30
SETTLE = 1.5
"""Seconds after the stream before the RSS at its end is read: finished rollouts leave
memory within one eviction pass (0.5 s) of their records reaching the disk (0.2 s)."""


def scale_task(index: int, turns: int, tokens: int) -> dict:
    return {"id": f"scale-{index}", "prompt": "p", "scenario": "scale", "turns": turns, "tokens": tokens}


# -- capture: the demo plays the rollouts once ------------------------------------------


def capture(path: Path, rollouts: int, turns: int, tokens: int) -> None:
    address = free_address()
    demo = subprocess.Popen(
        [sys.executable, "-m", "tracewatch.core.demo", "--address", address, "--log-level", "WARNING"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.connect(address)
    try:
        deadline = time.monotonic() + 60
        while True:
            socket.send_multipart([b"health", b"health", request_payload(HealthRequest())])
            if socket.poll(500):
                socket.recv_multipart()
                break
            if time.monotonic() > deadline:
                raise SystemExit("the demo server did not answer health")
        runs: dict[bytes, list[bytes]] = {}
        replies: dict[bytes, bytes] = {}
        for index in range(rollouts):
            request = RunRequest(
                task_data=scale_task(index, turns, tokens),
                client=ClientConfig(),
                model="bench",
                sampling=SamplingConfig(),
            )
            request_id = f"run-{index}".encode()
            runs[request_id] = []
            socket.send_multipart([request_id, b"run", request_payload(request)])
        while len(replies) < rollouts:
            request_id, kind, data = socket.recv_multipart()
            if request_id not in runs:
                continue  # a late answer to a health check
            if kind == b"delta":
                runs[request_id].append(data)
            else:
                replies[request_id] = data
    finally:
        socket.close(linger=0)
        context.term()
        demo.terminate()
        demo.wait(10)
    path.write_bytes(
        msgpack.packb([{"deltas": runs[key], "reply": replies[key]} for key in runs], use_bin_type=True)
    )


# -- the source: replays the captured frames at socket speed -------------------------------


def serve(path: Path) -> None:
    runs = msgpack.unpackb(path.read_bytes(), raw=False)
    context = zmq.Context()
    socket = context.socket(zmq.ROUTER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
    socket.bind("tcp://127.0.0.1:0")
    print(socket.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
    ok = msgpack.packb({"success": True, "error": None, "cancelled": False})
    live: list[list[Any]] = []
    started = 0
    while True:
        while socket.poll(0 if live else 100):
            client, request_id, method, _payload = socket.recv_multipart()
            if method == b"run":
                run = runs[started % len(runs)]
                started += 1
                live.append([client, request_id, run["deltas"], 0, run["reply"]])
            else:
                with contextlib.suppress(zmq.ZMQError):  # a cancel or health probe from a client that quit since
                    socket.send_multipart([client, request_id, b"reply", ok])
        gone: set[bytes] = set()
        for entry in live:
            client, request_id, deltas, position, reply = entry
            try:
                if position < len(deltas):
                    socket.send_multipart([client, request_id, b"delta", deltas[position]])
                else:
                    socket.send_multipart([client, request_id, b"reply", reply])
            except zmq.ZMQError as error:  # a client that quit: its runs end with it
                if error.errno != zmq.EHOSTUNREACH:
                    raise
                gone.add(client)
            entry[3] = position + 1
        live = [entry for entry in live if entry[3] <= len(entry[2]) and entry[0] not in gone]


class Source:
    def __init__(self, frames: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.live", "--serve", str(frames)], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        assert self.process.stdout is not None
        self.address = self.process.stdout.readline().strip()
        self._loading = self.cpu_seconds()  # reading the frames is not streaming them

    def cpu_seconds(self) -> float:
        """User + system CPU the source has used: how much of a core streaming took."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") - getattr(self, "_loading", 0.0)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


# -- measuring one client, in its own process -----------------------------------------------


class GcPauses:
    """The longest collection in wall time (what the screen waits), and the most CPU
    one took (the collector's own work: on a loaded box a pause is mostly waiting
    for a core, which is the machine's, not the collector's)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.most_cpu = 0.0
        self.most_cpu_generation = -1
        """The generation of the collection that took the most CPU."""
        self.total_cpu = 0.0
        """CPU every collection took, and how many were full ones."""
        self.full = 0
        self._start = self._cpu = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start, self._cpu = time.perf_counter(), time.thread_time()
        else:
            self.longest = max(self.longest, time.perf_counter() - self._start)
            cpu = time.thread_time() - self._cpu
            self.total_cpu += cpu
            self.full += info.get("generation") == 2
            if cpu > self.most_cpu:
                self.most_cpu, self.most_cpu_generation = cpu, info.get("generation", -1)


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """This process's peak RSS (VmHWM): not `ru_maxrss`, which Linux carries over from
    the parent across fork and exec, so a child would report its parent's peak."""
    with open("/proc/self/status") as handle:
        line = next(line for line in handle if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def wire_bytes(frames: Path, rollouts: int) -> tuple[int, int]:
    runs = msgpack.unpackb(frames.read_bytes(), raw=False)
    chosen = [runs[i % len(runs)] for i in range(rollouts)]
    return sum(sum(map(len, r["deltas"])) + len(r["reply"]) for r in chosen), sum(len(r["deltas"]) for r in chosen)


def write_config(address: str, rollouts: int, turns: int, tokens: int, directory: Path, concurrent: int | None = None) -> Path:
    """A config attaching to the source with `concurrent` rollouts in flight at once (all, by default)."""
    tasks = directory / "tasks.jsonl"  # as a config of thousands of tasks names them
    tasks.write_text("".join(json.dumps(scale_task(i, turns, tokens)) + "\n" for i in range(rollouts)))
    config = directory / "tracewatch.toml"
    config.write_text(
        f'[[variants]]\nname = "scale"\nattach = "{address}"\ntasks = {json.dumps(str(tasks))}\nmodel = "bench"\n'
        f"max_concurrent = {concurrent or rollouts}\n"
    )
    return config


def engine_for(address: str, rollouts: int, turns: int, tokens: int, directory: Path, concurrent: int | None = None) -> Any:
    from tracewatch.core.engine.live import LiveSession
    from tracewatch.core.recordings.recorder import Recorder
    from tracewatch.core.session.config import load_config

    config = write_config(address, rollouts, turns, tokens, directory, concurrent)
    recorder = Recorder(directory / "bench.twrec")
    return LiveSession(load_config(config), recorder=recorder, session_dir=directory / "session")


def measure_bare(address: str, rollouts: int, turns: int, tokens: int, concurrent: int) -> dict:
    """The same runs asked for, each frame received and decoded, nothing kept."""
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVHWM, 1000)  # as tracewatch's client holds at most
    socket.connect(address)
    payloads = [
        request_payload(
            RunRequest(task_data=scale_task(i, turns, tokens), client=ClientConfig(), model="bench", sampling=SamplingConfig())
        )
        for i in range(rollouts)
    ]
    start = time.perf_counter()
    sent, ended = min(concurrent, rollouts), 0
    for index in range(sent):
        socket.send_multipart([f"run-{index}".encode(), b"run", payloads[index]])
    while ended < rollouts:
        _request_id, kind, data = socket.recv_multipart()
        msgpack.unpackb(data, raw=False, strict_map_key=False)
        if kind == b"reply":
            ended += 1
            if sent < rollouts:
                socket.send_multipart([f"run-{sent}".encode(), b"run", payloads[sent]])
                sent += 1
    seconds = time.perf_counter() - start
    socket.close(linger=0)
    context.term()
    return {"seconds": seconds, "rss_end": rss_bytes()}


async def measure_verifiers(address: str, rollouts: int, turns: int, tokens: int, concurrent: int) -> dict:
    from verifiers.v1.configs.client import EvalClientConfig
    from verifiers.v1.serve import EnvClient as VerifiersClient
    from verifiers.v1.types import SamplingConfig as VerifiersSampling

    client = VerifiersClient(address)
    await client.wait_for_server_startup(timeout=60)
    slots = asyncio.Semaphore(concurrent)

    async def run(index: int) -> Any:
        async with slots:
            return await client.run(EvalClientConfig(), "bench", VerifiersSampling(), scale_task(index, turns, tokens))

    start = time.perf_counter()
    episodes = await asyncio.gather(*(run(i) for i in range(rollouts)))
    seconds = time.perf_counter() - start
    await asyncio.sleep(SETTLE)
    end = rss_bytes()
    del episodes
    await client.close()
    return {"seconds": seconds, "rss_end": end}


async def measure_headless(address: str, rollouts: int, turns: int, tokens: int, directory: Path, concurrent: int) -> dict:
    engine = engine_for(address, rollouts, turns, tokens, directory, concurrent)
    start = time.perf_counter()
    await engine.start()
    await engine.wait()
    seconds = time.perf_counter() - start
    await asyncio.sleep(SETTLE)
    end = rss_bytes()
    await engine.shutdown()
    return {"seconds": seconds, "deltas": sum(r.deltas for r in engine.store.rollouts.values()), "rss_end": end}


async def measure_app(address: str, rollouts: int, turns: int, tokens: int, directory: Path, concurrent: int) -> dict:
    from textual import events

    from tracewatch.tui.app import TracewatchApp

    engine = engine_for(address, rollouts, turns, tokens, directory, concurrent)
    app = TracewatchApp(engine)
    store = engine.store
    displays: list[float] = []
    latencies: list[float] = []
    stale: list[float] = []
    arrivals: dict[str, float] = {}
    visible: set[str] = set()
    waiting: list[Any] = []  # (pressed at, cursor row before), at most one

    start = time.perf_counter()
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.table
        display, observe, row_strip = app._display, store.observe, table._row_strip

        def on_display(screen: Any, renderable: Any) -> None:
            display(screen, renderable)
            if renderable is None:
                return
            now = time.perf_counter()
            displays.append(now)
            visible.clear()
            visible.update(table._visible_keys())
            if waiting and table.cursor_row != waiting[0][1]:
                latencies.append(now - waiting.pop()[0])

        def on_observe(key: str, delta: dict, t: float | None = None) -> None:
            observe(key, delta, t)
            if key in visible and key not in arrivals:
                arrivals[key] = time.perf_counter()

        def on_row_strip(key: str, layer: str | None) -> Any:
            arrived = arrivals.pop(key, None)
            if arrived is not None:
                stale.append(time.perf_counter() - arrived)
            return row_strip(key, layer)

        app._display, store.observe, table._row_strip = on_display, on_observe, on_row_strip  # type: ignore[method-assign]

        async def press_keys(until: Callable[[], bool], most: int | None = None) -> None:
            """Down, Up, Down... each once the last one was answered on screen."""
            down, pressed = True, 0
            while not until() and (most is None or pressed < most):
                if waiting and time.perf_counter() - waiting[0][0] > LOST_KEY:
                    waiting.clear()
                    latencies.append(LOST_KEY)
                if not waiting:
                    waiting.append((time.perf_counter(), table.cursor_row))
                    app.post_message(events.Key("down" if down else "up", None))
                    down, pressed = not down, pressed + 1
                await asyncio.sleep(KEY_EVERY)
            waiting.clear()

        def finished() -> bool:
            return len(store.rollouts) == rollouts and all(r.status.finished for r in store.rollouts.values())

        await pilot.pause()
        while table.row_count < 2:
            await asyncio.sleep(0.01)
        table.focus()
        await press_keys(finished)
        seconds = time.perf_counter() - start
        loaded = latencies[:]
        repaints = len(displays)
        latencies.clear()
        await pilot.pause(0.5)
        await press_keys(lambda: False, most=IDLE_KEYS)
        idle = latencies[:]
        end = rss_bytes()  # the idle keys took longer than SETTLE
        await engine.shutdown()
    return {
        "seconds": seconds,
        "deltas": sum(r.deltas for r in store.rollouts.values()),
        "keys_loaded": loaded,
        "keys_idle": idle,
        "repaints_per_second": repaints / seconds,
        "staleness": stale,
        "rss_end": end,
    }


def measure(mode: str, frames: Path, rollouts: int, turns: int, tokens: int, concurrent: int) -> dict:
    if mode == "verifiers":
        import verifiers.v1.serve  # noqa: F401 - imports are not the client's cost
    elif mode != "bare":
        import tracewatch.tui.app  # noqa: F401
    source = Source(frames)
    gc.collect()
    if mode in ("headless", "app"):  # as tracewatch's own entry points do
        from tracewatch.core.session.retention import FreezeAfterSlowCollections

        FreezeAfterSlowCollections().install()
    pauses = GcPauses()
    before = rss_bytes()
    cpu = time.process_time()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            directory = Path(scratch)
            if mode == "bare":
                result = measure_bare(source.address, rollouts, turns, tokens, concurrent)
            elif mode == "verifiers":
                result = asyncio.run(measure_verifiers(source.address, rollouts, turns, tokens, concurrent))
            elif mode == "headless":
                result = asyncio.run(measure_headless(source.address, rollouts, turns, tokens, directory, concurrent))
            else:
                result = asyncio.run(measure_app(source.address, rollouts, turns, tokens, directory, concurrent))
        result["source_cpu"] = source.cpu_seconds()
        result["cpu"] = time.process_time() - cpu
    finally:
        source.close()
    result.update(rss_growth=peak_rss_bytes() - before, gc_longest=pauses.longest, gc_cpu=pauses.most_cpu)
    result["rss_end_growth"] = result.pop("rss_end") - before
    return result


# -- the report ------------------------------------------------------------------------------


def summary(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    return (
        f"p50 {percentile(ordered, 0.5) * 1e3:6.1f} ms  p95 {percentile(ordered, 0.95) * 1e3:6.1f} ms  "
        f"max {ordered[-1] * 1e3:6.1f} ms  (n={len(values)})"
    )


def run_mode(mode: str, frames: Path, args: argparse.Namespace) -> dict:
    argv = [sys.executable, "-m", "bench.live", "--measure", mode, "--frames", str(frames)]
    argv += ["--rollouts", str(args.rollouts), "--turns", str(args.turns), "--tokens", str(args.tokens)]
    argv += ["--concurrent", str(args.concurrent or args.rollouts)]
    output = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    if output.returncode:
        raise SystemExit(f"{mode} failed:\n{output.stderr[-4000:]}")
    return json.loads(output.stdout.strip().splitlines()[-1])


def print_round(results: dict[str, dict], deltas: int, received: int, title: str) -> None:
    """One round's table: every client measured once, one after another."""
    print(f"\n{title}")
    base = deltas / results["verifiers"]["seconds"] if "verifiers" in results else float("nan")
    floor = deltas / results["bare"]["seconds"] if "bare" in results else float("nan")
    bare_cpu = results["bare"]["cpu"] if "bare" in results else float("nan")
    print(
        f"{'client':<12}{'deltas/s':>10}{'vs verifiers':>14}{'vs bare':>9}{'CPU s':>8}{'CPU us/delta':>14}{'CPU vs bare':>13}"
        f"{'RSS growth/wire':>17}{'at end':>8}{'longest GC':>12}{'GC CPU max':>12}{'source CPU':>12}"
    )
    for mode, result in results.items():
        rate = deltas / result["seconds"]
        print(
            f"{mode:<12}{rate:>10,.0f}{rate / base:>13.2f}x{rate / floor:>8.2f}x{result['cpu']:>8.1f}"
            f"{result['cpu'] / deltas * 1e6:>14.1f}{bare_cpu / result['cpu']:>12.2f}x"
            f"{result['rss_growth'] / received:>16.2f}x"
            f"{result['rss_end_growth'] / received:>7.2f}x"
            f"{result['gc_longest'] * 1e3:>9.1f} ms{result['gc_cpu'] * 1e3:>9.1f} ms"
            f"{result['source_cpu'] / result['seconds']:>11.0%}"
            + (f"  INCOMPLETE: {result['deltas']:,} deltas" if result.get("deltas", deltas) != deltas else "")
        )


def report(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        frames = Path(scratch) / "frames.msgpack"
        started = time.perf_counter()
        capture(frames, args.rollouts, args.turns, args.tokens)
        received, deltas = wire_bytes(frames, args.rollouts)
        print(
            f"{args.rollouts} scale rollouts x {args.turns} turns x {args.tokens} tokens/node: "
            f"{deltas:,} deltas, {received / 1e6:,.1f} MB on the wire (captured in {time.perf_counter() - started:.0f} s), "
            f"{args.concurrent or args.rollouts} at a time; "
            f"{os.cpu_count()} cores"
        )
        rounds = []
        for number in range(1, args.rounds + 1):
            load = os.getloadavg()[0]
            results = {mode: run_mode(mode, frames, args) for mode in args.clients.split(",")}
            rounds.append(results)
            print_round(results, deltas, received, f"round {number} of {args.rounds}, load {load:.1f} -> {os.getloadavg()[0]:.1f}")
    if args.rounds > 1 and "bare" in results:
        print("\nCPU vs bare (bare's CPU seconds / the client's), per round in order:")
        for mode in results:
            ratios = [each["bare"]["cpu"] / each[mode]["cpu"] for each in rounds]
            cpu = [each[mode]["cpu"] / deltas * 1e6 for each in rounds]
            print(f"  {mode:<12}{'  '.join(f'{ratio:.2f}x' for ratio in ratios)}   ({'  '.join(f'{us:.0f}' for us in cpu)} us of CPU a delta)")
    app = results.get("app")
    if app is None:
        return
    loaded, idle = sorted(app["keys_loaded"]), sorted(app["keys_idle"])
    print(f"\nkeypress to repaint, streaming: {summary(loaded)}")
    print(f"keypress to repaint, idle:      {summary(idle)}")
    if loaded and idle:
        ratio = percentile(loaded, 0.95) / max(percentile(idle, 0.95), 1e-9)
        print(f"  streaming p95 / idle p95: {ratio:.2f}x")
    print(f"repaints/s while streaming: {app['repaints_per_second']:.1f}")
    print(f"table staleness (rows on screen): {summary(app['staleness'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--concurrent", type=int, help="rollouts in flight at once (default: all)")
    parser.add_argument("--clients", default="verifiers,headless,app", help="which clients to measure (default: %(default)s)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds of every client in turn, each with its load (CPU ratios per round)"
    )
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--frames", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
    elif args.measure:
        print(json.dumps(measure(args.measure, args.frames, args.rollouts, args.turns, args.tokens, args.concurrent or args.rollouts)))
    else:
        report(args)


if __name__ == "__main__":
    main()
