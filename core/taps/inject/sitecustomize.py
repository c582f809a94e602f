"""tracewatch's eval tap, injected into a `vf-eval` it supervises (this folder goes
first on the child's PYTHONPATH; `TRACEWATCH_TAP` names where to stream).

When `verifiers.v1.env` is imported, `Env.run_slot` is wrapped: each in-process
rollout streams verifiers' own deltas (`DeltaStreamer(lambda: slot.traces, send)`,
watching every trace as it is minted, exactly as a served run streams them) and then
a served-style reply (the episode head and per-trace counts) to tracewatch. When
`verifiers.v1.cli.eval.runner` is imported, its run directory is reported as well.

It runs inside someone else's program, so: only the standard library, pyzmq and
msgpack (without pyzmq it says so on stderr and does nothing); nothing named `core`
or `tui` is imported (the user's project may have such packages); an existing
`sitecustomize` still runs; sending never blocks (a full queue drops the message and
counts it); and nothing here ever raises into the eval.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import itertools
import os
import sys
from typing import Any

ADDRESS_VAR = "TRACEWATCH_TAP"
QUEUE = 10_000
"""Messages that may wait for tracewatch before new ones are dropped (and counted)."""
LINGER_MS = 3000
"""How long the eval's exit waits for queued messages to reach tracewatch."""
_HERE = os.path.dirname(os.path.abspath(__file__))


def _say(message: str) -> None:
    try:
        sys.stderr.write(f"tracewatch tap: {message}\n")
    except Exception:
        pass


def _chain() -> None:
    """Run the `sitecustomize` this one shadows, if there is one."""
    ours = sys.modules.get("sitecustomize")
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
        sys.modules.pop("sitecustomize", None)
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as error:
        _say(f"the environment's own sitecustomize failed: {error!r}")
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours


class _Sender:
    """One PUSH socket to tracewatch; every send is non-blocking."""

    def __init__(self, address: str) -> None:
        import msgpack
        import zmq

        self._zmq = zmq
        self._pack = msgpack.packb
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PUSH)
        self._socket.setsockopt(zmq.SNDHWM, QUEUE)
        self._socket.setsockopt(zmq.LINGER, LINGER_MS)
        self._socket.connect(address)
        self.dropped = 0
        self._ids = itertools.count()
        self.send(b"hello", b"", self._pack({"pid": os.getpid(), "argv": sys.argv}, use_bin_type=True))

    def new_run(self) -> bytes:
        return str(next(self._ids)).encode()

    def packed(self, payload: object) -> bytes:
        return bytes(self._pack(payload, use_bin_type=True))

    def send(self, kind: bytes, run: bytes, payload: bytes) -> None:
        try:
            self._socket.send_multipart([kind, run, payload, str(self.dropped).encode()], self._zmq.NOBLOCK)
        except self._zmq.Again:
            self.dropped += 1
        except Exception:
            self.dropped += 1

    def close(self) -> None:
        try:
            self._socket.close()
            self._context.term()
        except Exception:
            pass


_sender: _Sender | None = None


def _connect() -> _Sender | None:
    global _sender
    if _sender is None:
        try:
            _sender = _Sender(os.environ[ADDRESS_VAR])
        except ImportError as error:
            _say(f"cannot stream rollouts to tracewatch: {error.name or error} is not installed in this environment (pip install pyzmq msgpack)")
            os.environ.pop(ADDRESS_VAR, None)
            return None
        except Exception as error:
            _say(f"cannot stream rollouts to tracewatch: {error!r}")
            os.environ.pop(ADDRESS_VAR, None)
            return None
        import atexit

        atexit.register(_sender.close)
    return _sender


def _reply_of(episode: Any) -> dict[str, Any]:
    """What a served run replies: the episode without its traces, and their sizes."""
    from verifiers.v1.serve.delta import dump

    return {
        "success": True,
        "error": None,
        "head": dump(episode, exclude={"traces"}),
        "traces": [{"id": t.id, "nodes": len(t.nodes), "calls": len(t.calls)} for t in episode.traces],
    }


def _failed(error: BaseException) -> dict[str, Any]:
    import asyncio

    if isinstance(error, asyncio.CancelledError | KeyboardInterrupt):
        return {"success": False, "error": "Cancelled: rollout aborted"}
    return {"success": False, "error": f"{type(error).__name__}: {error}"}


def _wrap_run_slot(env_module: Any) -> None:
    env_class = env_module.Env
    original = env_class.run_slot
    if getattr(original, "__tracewatch__", False):
        return

    async def run_slot(self: Any, slot: Any, ctx: Any, semaphore: Any = None, on_complete: Any = None, on_trace: Any = None) -> Any:
        sender = _connect() if os.environ.get(ADDRESS_VAR) else None
        streamer = None
        if sender is not None:
            try:
                from verifiers.v1.serve.delta import DeltaStreamer, dump, pack

                run = sender.new_run()
                task = slot.task
                begin = {
                    "task_data": dump(task.data),
                    "task_key": getattr(task, "key", None),
                    "model": getattr(ctx, "model", None),
                    "sampling": dump(ctx.sampling) if getattr(ctx, "sampling", None) is not None else None,
                }
                sender.send(b"begin", run, pack(begin))

                async def send(delta: dict[str, Any], sender: _Sender = sender) -> None:
                    sender.send(b"delta", run, pack(delta))

                streamer = DeltaStreamer(lambda: slot.traces, send)
                await streamer.__aenter__()
            except Exception as error:
                _say(f"this rollout will not stream: {error!r}")
                streamer = None
        if streamer is None or sender is None:
            return await original(self, slot, ctx, semaphore, on_complete, on_trace)

        def watch(trace: Any) -> None:
            try:
                streamer.watch(trace)
            except Exception as error:
                _say(f"a trace could not be watched: {error!r}")
            if on_trace is not None:
                on_trace(trace)

        try:
            episode = await original(self, slot, ctx, semaphore, on_complete, watch)
        except BaseException as error:
            try:
                await streamer.__aexit__(type(error), error, None)
                sender.send(b"reply", run, pack(_failed(error)))
            except BaseException:
                pass
            raise
        try:
            await streamer.__aexit__(None, None, None)
            sender.send(b"reply", run, pack(_reply_of(episode)))
        except Exception as error:
            _say(f"the end of a rollout could not be streamed: {error!r}")
        return episode

    setattr(run_slot, "__tracewatch__", True)  # noqa: B010 - a function attribute mypy cannot see
    setattr(run_slot, "__wrapped__", original)  # noqa: B010
    env_class.run_slot = run_slot


def _wrap_output_path(runner_module: Any) -> None:
    """Report the run directory (its traces.jsonl) when vf-eval decides it."""
    original = runner_module.output_path

    def output_path(config: Any) -> Any:
        path = original(config)
        sender = _connect() if os.environ.get(ADDRESS_VAR) else None
        if sender is not None:
            sender.send(b"run_dir", b"", sender.packed({"path": os.path.abspath(str(path))}))
        return path

    runner_module.output_path = output_path


_PATCHES = {"verifiers.v1.env": _wrap_run_slot, "verifiers.v1.cli.eval.runner": _wrap_output_path}


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a module right after its own code ran, the first time it is imported."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def patched(module: Any) -> None:
            exec_module(module)
            try:
                patch(module)
            except Exception as error:
                _say(f"{name} could not be tapped; rollouts will not stream: {error!r}")

        spec.loader.exec_module = patched  # type: ignore[method-assign]
        return spec


def _install() -> None:
    _chain()
    if os.environ.get(ADDRESS_VAR):
        sys.meta_path.insert(0, _Finder())


try:
    _install()
except Exception as error:  # never into the eval
    _say(f"not installed: {error!r}")
