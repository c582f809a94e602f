"""tracewatch's eval tap, injected into a `vf-eval` it supervises (this folder goes
first on the child's PYTHONPATH; `TRACEWATCH_TAP` names where to stream).

When `verifiers.v1.env` is imported (or at once, if something imported it before this
ran: a `.pth` file, the project's own `sitecustomize`), `Env.run_slot` is wrapped: each in-process
rollout streams verifiers' own deltas (`DeltaStreamer(lambda: slot.traces, send)`,
watching every trace as it is minted, exactly as a served run streams them) and then
a served-style reply (the episode head and per-trace counts) to tracewatch. When
`verifiers.v1.cli.eval.runner` is imported, its run directory is reported as well.
Each process that taps `Env` says so (`TAPPED`), so tracewatch can tell an eval whose
Env it never saw from one that ran no rollout.

It runs inside someone else's program, so: only the standard library, pyzmq and
msgpack (without pyzmq it says so on stderr and does nothing); nothing of `tracewatch`
is imported, nor anything named `core` or `tui` (the user's project may have such
packages); an existing
`sitecustomize` still runs; sending never blocks (a full queue drops the
message and counts it); and nothing here ever raises into the eval.

A viewer that is stopped or slow (a SIGSTOP, a laptop lid, a slow terminal) fills the
queue, and what does not fit is dropped. The runs it dropped messages of are told in a
`loss` before anything else is sent after the drop (naming the runs still running, so
the viewer ends those whose end it missed), by a thread of the tap's own as soon as the
queue has room again, whether or not the eval sends anything more. At the exit, what is
still queued waits for the viewer `LINGER_MS` at most; a `closed` that says how many
messages were queued and which runs were lost goes on a second socket of its own, which
no backlog holds up, so a viewer resumed after the eval ended can tell what it missed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracewatch_guest import framing

QUEUE = 10_000
"""Messages that may wait for tracewatch before new ones are dropped (and counted)."""
QUEUE_VAR = "TRACEWATCH_TAP_QUEUE"
"""The environment variable that sets `QUEUE` (a positive integer) for an eval."""
TELL_SECONDS = 0.1
"""How often the tap tries to tell a loss while the queue is full."""
LINGER_MS = 3000
"""How long the eval's exit waits for queued messages to reach tracewatch."""
_HERE = os.path.dirname(os.path.abspath(__file__))
_GUEST = os.path.dirname(_HERE)
GUEST_PACKAGE = "tracewatch_guest"


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


def _load_framing() -> Any:
    """`tracewatch_guest.framing`, from the package this file belongs to. The folder
    that holds the package holds `tracewatch` too (and, in a clone, `core` and `tui`), so
    it cannot go on the eval's path: the package is imported from its own file, its folder alone its path."""
    if GUEST_PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            GUEST_PACKAGE, os.path.join(_GUEST, "__init__.py"), submodule_search_locations=[_GUEST]
        )
        if spec is None or spec.loader is None:
            raise ImportError(f"no {GUEST_PACKAGE} package at {_GUEST}")
        package = importlib.util.module_from_spec(spec)
        sys.modules[GUEST_PACKAGE] = package
        try:
            spec.loader.exec_module(package)
        except BaseException:
            sys.modules.pop(GUEST_PACKAGE, None)
            raise
    return importlib.import_module(f"{GUEST_PACKAGE}.framing")


def _queue_bound() -> int:
    try:
        bound = int(os.environ.get(QUEUE_VAR, QUEUE))
    except ValueError:
        bound = QUEUE
    return bound if bound > 0 else QUEUE


class _Sender:
    """One PUSH socket to tracewatch, every send non-blocking, and one for the close's
    word; the eval's threads and the loss teller share them under a lock."""

    def __init__(self, address: str) -> None:
        import msgpack
        import zmq

        self._zmq = zmq
        self._pack = msgpack.packb
        self._address = address
        self._run_prefix = f"{os.getpid()}."
        """A run's id begins with its process's: the eval's processes (forked or started
        afresh) each count runs from 0, and a `loss` speaks for its own process's runs."""
        self._fresh()
        self._open()

    def _fresh(self) -> None:
        """Nothing sent, dropped or lost yet, no loss thread, no sockets: a new sender,
        or the one a forked child inherits."""
        self.dropped = 0
        self.sent = 0
        """Messages queued for tracewatch (those the exit discards unsent among them)."""
        self.lost: set[bytes] = set()
        """Runs that had messages dropped which no `loss` told yet."""
        self.running: set[bytes] = set()
        self._lock = threading.Lock()
        self._lossy = threading.Condition(self._lock)
        self._teller: threading.Thread | None = None
        self._closed = False
        self._ids = itertools.count()
        self._socket: Any = None

    def _open(self) -> None:
        zmq = self._zmq
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PUSH)
        self._socket.setsockopt(zmq.SNDHWM, _queue_bound())
        self._socket.setsockopt(zmq.LINGER, LINGER_MS)
        self._socket.connect(self._address)
        self._notices = self._context.socket(zmq.PUSH)
        self._notices.setsockopt(zmq.LINGER, LINGER_MS)
        self._notices.connect(self._address)  # now, while the viewer answers: a stopped one could not greet it at the exit
        if not self._put(framing.HELLO, framing.NO_RUN, self.packed({"pid": os.getpid(), "argv": sys.argv})):
            self._drop(framing.NO_RUN)

    def forked(self) -> None:
        """In a forked child (vf-eval's and verifiers' servers may fork workers): the
        parent's lock may have been held by its loss thread, which the child does not
        have, so the child's first send would wait for ever, and its exit with it; its
        sockets belong to the parent's zmq threads, which the child does not have
        either. The child starts afresh, its sockets opened (and its hello sent) at
        its first send, its runs named apart from the parent's."""
        self._fresh()
        self._run_prefix = f"{os.getpid()}."

    def new_run(self) -> bytes:
        return f"{self._run_prefix}{next(self._ids)}".encode()

    def packed(self, payload: object) -> bytes:
        return bytes(self._pack(payload, use_bin_type=True))

    def send(self, kind: bytes, run: bytes, payload: bytes) -> None:
        """Queued, unless the queue is full or a loss is still untold: then dropped,
        counted, and its run told lost as soon as there is room."""
        with self._lock:
            if self._socket is None:  # a forked child's first send
                try:
                    self._open()
                except Exception:
                    self._drop(run)
                    return
            if kind == framing.BEGIN:
                self.running.add(run)
            elif kind == framing.REPLY:
                self.running.discard(run)
            if (self.lost and not self._tell_loss()) or not self._put(kind, run, payload):
                self._drop(run)

    def _put(self, kind: bytes, run: bytes, payload: bytes) -> bool:
        try:
            self._socket.send_multipart(framing.encode(kind, run, payload, self.dropped), self._zmq.NOBLOCK)
        except Exception:
            return False
        self.sent += 1
        return True

    def _drop(self, run: bytes) -> None:
        self.dropped += 1
        if run == framing.NO_RUN:
            return
        self.lost.add(run)
        if self._teller is None and not self._closed:
            self._teller = threading.Thread(target=self._tell, name="tracewatch tap loss", daemon=True)
            self._teller.start()
        self._lossy.notify()

    def _loss(self) -> bytes:
        return self.packed({"lost": sorted(self.lost), "running": sorted(self.running), "sent": self.sent, "runs_from": self._run_prefix.encode()})

    def _tell_loss(self) -> bool:
        if not self._put(framing.LOSS, framing.NO_RUN, self._loss()):
            return False
        self.lost = set()
        return True

    def _tell(self) -> None:
        """Tells a loss once the queue has room, with no more of the eval's traffic
        needed (a viewer resumed after the eval's last message learns it too); idle
        otherwise."""
        with self._lock:
            while not self._closed:
                if self.lost:
                    self._tell_loss()
                self._lossy.wait(TELL_SECONDS if self.lost else None)

    def close(self) -> None:
        try:
            with self._lock:
                self._closed = True
                if self._socket is None:  # a forked child that sent nothing
                    return
                self._lossy.notify()
                message = framing.encode(framing.CLOSED, framing.NO_RUN, self._loss(), self.dropped)
                try:
                    self._notices.send_multipart(message, self._zmq.NOBLOCK)
                except Exception:
                    pass
            self._notices.close()
            self._socket.close()
            self._context.term()
        except Exception:
            pass


_sender: _Sender | None = None


def _connect() -> _Sender | None:
    global _sender
    if _sender is None:
        try:
            _sender = _Sender(os.environ[framing.ADDRESS_VAR])
        except ImportError as error:
            _say(f"cannot stream rollouts to tracewatch: {error.name or error} is not installed in this environment (pip install pyzmq msgpack)")
            os.environ.pop(framing.ADDRESS_VAR, None)
            return None
        except Exception as error:
            _say(f"cannot stream rollouts to tracewatch: {error!r}")
            os.environ.pop(framing.ADDRESS_VAR, None)
            return None
        import atexit

        atexit.register(_sender.close)
        os.register_at_fork(after_in_child=_sender.forked)
    return _sender


def _reply_of(episode: Any) -> dict[str, Any]:
    """What a served run replies: the episode without its traces, and their sizes."""
    from verifiers.v1.serve.delta import dump

    traces = ((t.id, len(t.nodes), len(t.calls)) for t in episode.traces)
    return framing.served_reply(dump(episode, exclude={"traces"}), traces)


class _SlotAnnounced:
    """vf-eval's semaphore for one run, telling tracewatch when the run gets a slot:
    until then it waits (queued), which is neither running nor a stall."""

    def __init__(self, semaphore: Any, announce: Any) -> None:
        self._semaphore = semaphore
        self._announce = announce

    async def __aenter__(self) -> Any:
        entered = await self._semaphore.__aenter__()
        try:
            self._announce()
        except Exception:
            pass
        return entered

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._semaphore.__aexit__(*exc)


def _wrap_run_slot(env_module: Any, how: str) -> None:
    env_class = env_module.Env
    original = env_class.run_slot
    if getattr(original, "__tracewatch__", False):
        return

    async def run_slot(self: Any, slot: Any, ctx: Any, semaphore: Any = None, on_complete: Any = None, on_trace: Any = None) -> Any:
        sender = _connect() if os.environ.get(framing.ADDRESS_VAR) else None
        streamer = None
        if sender is not None:
            try:
                from verifiers.v1.serve.delta import DeltaStreamer, dump, pack

                run = sender.new_run()
                task = slot.task
                begin = framing.begin_payload(
                    dump(task.data),
                    getattr(ctx, "model", None),
                    dump(ctx.sampling) if getattr(ctx, "sampling", None) is not None else None,
                    task_key=getattr(task, "key", None),
                    queued=semaphore is not None,
                )
                sender.send(framing.BEGIN, run, pack(begin))
                if semaphore is not None:
                    semaphore = _SlotAnnounced(semaphore, lambda sender=sender, run=run: sender.send(framing.SLOT, run, b""))

                async def send(delta: dict[str, Any], sender: _Sender = sender) -> None:
                    sender.send(framing.DELTA, run, pack(delta))

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
                sender.send(framing.REPLY, run, pack(framing.failed_reply(error)))
            except BaseException:
                pass
            raise
        try:
            await streamer.__aexit__(None, None, None)
            sender.send(framing.REPLY, run, pack(_reply_of(episode)))
        except Exception as error:
            _say(f"the end of a rollout could not be streamed: {error!r}")
        return episode

    setattr(run_slot, "__tracewatch__", True)  # noqa: B010 - a function attribute mypy cannot see
    setattr(run_slot, "__wrapped__", original)  # noqa: B010
    env_class.run_slot = run_slot
    sender = _connect()
    if sender is not None:
        sender.send(framing.TAPPED, framing.NO_RUN, sender.packed({"pid": os.getpid(), "how": how}))


def _wrap_output_path(runner_module: Any, how: str) -> None:
    """Report the run directory (its traces.jsonl) when vf-eval decides it."""
    original = runner_module.output_path
    if getattr(original, "__tracewatch__", False):
        return

    def output_path(config: Any) -> Any:
        path = original(config)
        sender = _connect() if os.environ.get(framing.ADDRESS_VAR) else None
        if sender is not None:
            sender.send(framing.RUN_DIR, framing.NO_RUN, sender.packed({"path": os.path.abspath(str(path))}))
        return path

    setattr(output_path, "__tracewatch__", True)  # noqa: B010
    runner_module.output_path = output_path


_PATCHES = {"verifiers.v1.env": _wrap_run_slot, "verifiers.v1.cli.eval.runner": _wrap_output_path}


def _patch(name: str, module: Any, how: str) -> None:
    try:
        _PATCHES[name](module, how)
    except Exception as error:
        _say(f"{name} could not be tapped; rollouts will not stream: {error!r}")


def _patch_imported() -> None:
    """Patch whatever of ours is imported already: before this ran, or by a loader
    this finder was not asked about (the runner imports the env, so tapping one
    catches the other)."""
    for name in _PATCHES:
        module = sys.modules.get(name)
        if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False) is False:
            _patch(name, module, "already imported")


class _PatchingLoader(importlib.abc.Loader):
    """The loader a module would have had, then its patch once its code ran."""

    def __init__(self, name: str, loader: Any) -> None:
        self.name = name
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        # the module keeps its own loader (tracebacks and resources read through it)
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _patch(self.name, module, "on import")
        _patch_imported()


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a module right after its own code ran, whichever finder finds it."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _PatchingLoader(name, spec.loader)
        return spec


def _install() -> None:
    global framing  # bound here, not imported: see `_load_framing`
    framing = _load_framing()
    tapping = bool(os.environ.get(framing.ADDRESS_VAR))
    if tapping:
        sys.meta_path.insert(0, _Finder())  # before the project's sitecustomize runs
    _chain()
    if tapping:
        _patch_imported()


try:
    _install()
except Exception as error:  # never into the eval
    _say(f"not installed: {error!r}")
