"""verifiers 0.4.0's own `EnvClient` as a driver in a process of its own, for a test
that kills it mid-rollout (a vf-eval, an orchestrator, any program that dies):

    python -m tests.support.killable_driver ADDRESS BASE_URL API_KEY_VAR TASK_JSON...

It runs the first task to its end and prints `{"done": ID}`, then sends the rest at
once and prints `{"sent": [IDS]}`, and waits on them (until it is killed, for a task
the model holds). One JSON line each on stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys

from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient
from verifiers.v1.types import SamplingConfig

SAMPLING = SamplingConfig(temperature=0.0, max_tokens=256)


async def drive(address: str, base_url: str, key_var: str, tasks: list[dict]) -> None:
    client = EnvClient(address)
    config = EvalClientConfig(base_url=base_url, api_key_var=key_var)
    await client.wait_for_server_startup(timeout=60, interval=0.2)
    first, *rest = tasks
    await client.run(config, "fake-model", SAMPLING, first)
    print(json.dumps({"done": first["id"]}), flush=True)
    runs = [asyncio.ensure_future(client.run(config, "fake-model", SAMPLING, task)) for task in rest]
    await asyncio.sleep(0)  # each run's request is on the socket before it says so
    print(json.dumps({"sent": [task["id"] for task in rest]}), flush=True)
    await asyncio.gather(*runs)
    print(json.dumps({"done": [task["id"] for task in rest]}), flush=True)


if __name__ == "__main__":
    address, base_url, key_var, *tasks = sys.argv[1:]
    asyncio.run(drive(address, base_url, key_var, [json.loads(task) for task in tasks]))
