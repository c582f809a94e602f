"""`python -m tracewatch.core.demo`: serve demo rollouts on the verifiers wire, no model and no
network. The bound address is the first line on stdout; logs go to stderr."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys

import zmq

from tracewatch.core.demo.server import DemoServer
from tracewatch.core.demo.tasks import DEFAULT_TASKS

logger = logging.getLogger("tracewatch.core.demo")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tracewatch.core.demo", description=__doc__)
    parser.add_argument("--address", default="tcp://127.0.0.1:0",
                        help="ZMQ endpoint to bind; port 0 picks a free one (default: %(default)s)")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="divide every wait by this; 1 is human-watchable (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="content and timing derive from this and the task id (default: %(default)s)")
    parser.add_argument("--print-tasks", action="store_true",
                        help="print the default task list as JSONL (one task_data a line) and exit")
    parser.add_argument("--log-level", default="INFO", help="stderr log level (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.speed > 0:
        parser.error("--speed must be positive")
    return args


async def serve(args: argparse.Namespace) -> str:
    """Serve until SIGTERM or SIGINT; return the signal's name. The address is printed
    only once the signals are handled, so whoever read it may stop us at once."""
    server = DemoServer(args.address, speed=args.speed, seed=args.seed)
    loop = asyncio.get_running_loop()
    serving = loop.create_task(server.serve())
    caught: list[str] = []

    def stop(sig: signal.Signals) -> None:
        caught.append(sig.name)
        serving.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig)
    print(server.address, flush=True)
    try:
        await serving
    except asyncio.CancelledError:
        if not caught:
            raise
    return caught[0] if caught else "end"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.print_tasks:
        for task in DEFAULT_TASKS:
            print(json.dumps(task))
        return 0
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        reason = asyncio.run(serve(args))
    except zmq.ZMQError as e:
        logger.error("cannot serve on %s: %s", args.address, e)
        return 2
    logger.info("demo env server down (%s)", reason)
    return 0


if __name__ == "__main__":
    sys.exit(main())
