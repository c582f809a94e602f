"""Serve a verifiers env for tracewatch, from the Python environment it is installed in.

    python -m tracewatch_guest.serve_verifiers --env-config env.toml [--address tcp://127.0.0.1:5000] [--workers N]
    python -m tracewatch_guest.serve_verifiers --env-config env.toml --write-tasks tasks.jsonl [--limit N]

The env config is the `[env]` block of a vf-eval config (and optionally its `[serve]`
block); tracewatch sends each rollout's model, endpoint and sampling itself, so the
rest of such a file is ignored. Serving prints the bound address as the first line of
stdout (so `--address tcp://127.0.0.1:0` works) and logs to stderr.

This module imports only the standard library, and verifiers at run time: it also runs
as a plain script (`python path/to/serve_verifiers.py ...`) in an environment that has
verifiers but not tracewatch.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

DEFAULT_ADDRESS = "tcp://127.0.0.1:5000"
TOP_LEVEL = ("env", "serve")


class LaunchError(Exception):
    """A problem the user can fix; printed as one message, no traceback."""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.limit is not None and args.write_tasks is None:
        parser.error("--limit goes with --write-tasks")
    try:
        env_config, serve_config = load_env_config(Path(args.env_config))
        if args.write_tasks is not None:
            count = write_tasks(env_config, Path(args.write_tasks), args.limit)
            print(f"wrote {count} tasks to {args.write_tasks}", file=sys.stderr)
            return 0
        serve(env_config, serve_config, args.address, args.workers)
    except LaunchError as error:
        print(f"serve_verifiers: {error}", file=sys.stderr)
        return 2
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tracewatch_guest.serve_verifiers",
        description="Serve a verifiers env over its ZMQ wire for tracewatch, or write its tasks as JSONL.",
    )
    parser.add_argument("--env-config", required=True, help="TOML file with an [env] table (and optionally [serve])")
    parser.add_argument(
        "--address", help=f"ZMQ address to bind (default: [serve].address, else {DEFAULT_ADDRESS}); port 0 picks one"
    )
    parser.add_argument(
        "--workers", type=_positive, help="worker processes, scaled up on demand (default: [serve].pool, else 1)"
    )
    parser.add_argument("--write-tasks", metavar="FILE", help="write the taskset's task_data as JSONL to FILE and exit")
    parser.add_argument("--limit", type=_positive, help="with --write-tasks: at most this many tasks")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _require_verifiers() -> None:
    try:
        import verifiers.v1.serve  # noqa: F401
    except ModuleNotFoundError as error:
        if error.name == "verifiers":
            raise LaunchError(
                f"verifiers is not installed for {sys.executable}. Run this launcher with the "
                "Python that has your env installed (e.g. `uv run python -m tracewatch_guest.serve_verifiers ...` "
                "in your env's project), or install it here: pip install 'verifiers==0.4.0'"
            ) from None
        if error.name == "verifiers.v1" or error.name == "verifiers.v1.serve":
            raise LaunchError(
                "this verifiers has no v1 env server; tracewatch speaks the wire of verifiers 0.4.0: "
                "pip install 'verifiers==0.4.0'"
            ) from None
        raise LaunchError(f"verifiers is installed but cannot be imported: {error}") from None


def load_env_config(path: Path) -> tuple[Any, Any]:
    """The file's `[env]` as verifiers' concrete EnvConfig, and its `[serve]` block. The
    file is read before verifiers is imported, so a mistake in it is reported at once."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise LaunchError(f"{path}: cannot be read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise LaunchError(f"{path}: invalid TOML: {error}") from None
    if not isinstance(data.get("env"), dict):
        raise LaunchError(
            f'{path}: expected an [env] table, e.g.\n  [env.taskset]\n  id = "my-taskset"\n'
            '  [env.agent.runtime]\n  type = "subprocess"'
        )
    if ignored := [key for key in data if key not in TOP_LEVEL]:
        print(
            f"serve_verifiers: ignoring {', '.join(ignored)} in {path}: tracewatch sends each "
            "rollout's model, endpoint and sampling itself",
            file=sys.stderr,
        )
    _require_verifiers()
    from pydantic import ValidationError
    from verifiers.v1.configs.agent import agent_config_fields
    from verifiers.v1.configs.serve import ServeConfig
    from verifiers.v1.utils.loaders import resolve_env_config

    try:
        env_config = resolve_env_config(data["env"])
        serve_config = ServeConfig.model_validate(data.get("serve", {}))
    except ValidationError as error:
        block = "serve" if error.title == ServeConfig.__name__ else "env"
        lines = [f"{path}: {block}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()]
        raise LaunchError("invalid env config:\n" + "\n".join(lines)) from None
    except (ModuleNotFoundError, AttributeError, TypeError, ValueError) as error:
        # an unknown or malformed taskset/harness plugin, as verifiers' own CLI reports it
        raise LaunchError(f"{path}: {error}") from None
    if not env_config.taskset.id:
        raise LaunchError(f'{path}: expected env.taskset.id, the taskset to serve ([env.taskset] id = "...")')
    for role, agent in agent_config_fields(env_config).items():
        if agent.runtime.type == "prime" and "runtime" not in (data["env"].get(role) or {}):
            print(
                f"serve_verifiers: note: env.{role}.runtime is verifiers' default, a remote Prime "
                f'sandbox; to run rollouts on this machine set [env.{role}.runtime] type = "subprocess"',
                file=sys.stderr,
            )
    return env_config, serve_config


def write_tasks(env_config: Any, out: Path, limit: int | None) -> int:
    """Write each task's dumped TaskData, exactly what verifiers' client sends as a run's
    `task_data`. Written to a temporary file and renamed, so a taskset that fails half
    way leaves no partial task list behind."""
    from verifiers.v1.utils.loaders import load_environment

    taskset = load_environment(env_config).taskset
    if limit is not None:
        taskset = taskset.take(limit)
    elif not taskset.bounded:
        raise LaunchError(f"taskset {env_config.taskset.id!r} is infinite; bound it with --limit N")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            for task in taskset:
                file.write(json.dumps(task.data.model_dump(mode="json")) + "\n")
                count += 1
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    return count


class _AnnounceAddress:
    """Stands in for serve_env's address queue: the bound address goes to stdout, where
    a parent that asked for port 0 reads it."""

    def put(self, address: str) -> None:
        print(address, flush=True)


def serve(env_config: Any, serve_config: Any, address: str | None, workers: int | None) -> None:
    """Serve until SIGTERM or Ctrl-C: one in-process server for one worker, else
    verifiers' elastic pool (it speaks the same wire)."""
    from verifiers.v1.configs.serve import pool_serve_kwargs
    from verifiers.v1.serve import serve_env
    from verifiers.v1.utils.logging import setup_logging

    if workers is not None:
        pool = {"max_workers": workers, "elastic": True}
    elif "pool" in serve_config.model_fields_set:
        pool = pool_serve_kwargs(serve_config.pool)
    else:
        pool = {"max_workers": 1}
    import zmq

    address = address or serve_config.address or DEFAULT_ADDRESS
    try:
        serve_env(
            **pool,
            address=address,
            address_queue=_AnnounceAddress(),
            log_setup=functools.partial(setup_logging, "INFO"),  # picklable, for spawned workers
            config=env_config,
            max_concurrent=serve_config.max_concurrent,
        )
    except zmq.ZMQError as error:
        raise LaunchError(f"cannot serve on {address}: {error}") from None


if __name__ == "__main__":
    sys.exit(main())
