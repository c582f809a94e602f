"""A driver killed behind the proxy with its rollouts in flight: verifiers 0.4.0's own
env server (`serve_env`) behind a real proxy, verifiers' own `EnvClient` driving from
a process of its own, killed with SIGKILL mid-rollout. The server runs on for a client
that left without a cancel and sends its reply to nobody (it logs the failed send); the
proxy closes that connection upstream, so nothing more of the run can come: the view
ends it *unobserved*, saying its driver closed the connection, and the counts and the
headless summary agree. Another driver's connection, and a new one made after the
kill, go on. Before, the view forgot the connection and ended nothing: the run stayed
"running" for ever."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient as VerifiersClient
from verifiers.v1.types import SamplingConfig

from tests.support.interop import tw_calc
from tests.support.interop.fake_model import MODEL, FakeModel
from tests.support.interop.servers import API_KEY_VAR, ServerProcess
from tests.support.polling import eventually
from tests.support.proxy_sessions import ProxySessions
from tests.support.tether import TetheredProcess
from tracewatch.core.engine.headless import summary_lines
from tracewatch.core.session.status import Status

pytestmark = pytest.mark.verifiers

WAIT = 60.0
SAMPLING = SamplingConfig(temperature=0.0, max_tokens=256)
DRIVER_LEFT = ("its driver closed the connection before the run's reply", "the env server may still be running it")
"""What the view says of a run whose driver went away."""


def driver_left(reason: str | None) -> bool:
    return all(words in (reason or "") for words in DRIVER_LEFT)


def task(idx: int, expression: str, answer: int, directives: str = "") -> dict:
    return tw_calc.task(idx, expression, answer, directives).data.model_dump(mode="json")


WHOLE = task(0, "17 * 23", 391)
"""The killed driver's first run, ended before the kill."""
CUT = task(1, "6 * 7", 42, "hang=2")
"""Its second, held in its second model call when the driver is killed."""
LIVE = task(2, "5 * 5", 25, "hang=2")
"""Another driver's run, on a connection that stays, held too."""
AGAIN = task(3, "2 * 3", 6)
"""A driver's run on a connection made after the kill (a driver that reconnects)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process = ServerProcess(1, tmp_path_factory.mktemp("home"))
    yield process
    process.stop()


@pytest.fixture
async def proxy(server, tmp_path):
    sessions = ProxySessions(server.address, tmp_path / "s")
    yield await sessions.start()
    await sessions.shutdown()


class Driver:
    """The killable driver's process and the lines it printed, read by a thread (the
    proxy's view runs on this test's loop)."""

    def __init__(self, listen: str, base_url: str, *tasks: dict) -> None:
        self.process = TetheredProcess(
            [sys.executable, "-m", "tests.support.killable_driver", listen, base_url, API_KEY_VAR, *map(json.dumps, tasks)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.said: list[str] = []
        """Its JSON lines, and whatever else it wrote (a traceback)."""
        self._reader = threading.Thread(target=lambda: self.said.extend(self.process.stdout or ()), daemon=True)
        self._reader.start()

    def told(self, key: str, value: object) -> bool:
        return json.dumps({key: value}) + "\n" in list(self.said)

    def seen(self) -> str:
        return f"; the driver said {list(self.said)} (exit code {self.process.poll()})"


async def test_a_killed_drivers_run_ends_unobserved_and_the_other_connections_go_on(server, proxy) -> None:
    engine, variant = proxy
    rollouts = engine.store.variant_rollouts

    def run_of(data: dict):
        return next((r for r in rollouts("px") if r.task_data.get("id") == data["id"]), None)

    def status_of(data: dict) -> Status | None:
        return None if (rollout := run_of(data)) is None else rollout.status

    def seen() -> str:
        return f"; the view had {[(r.task_data.get('id'), r.status.value, r.reason) for r in rollouts('px')]}"

    with FakeModel() as model:
        other = VerifiersClient(variant.listen)
        config = EvalClientConfig(base_url=model.base_url, api_key_var=API_KEY_VAR)
        killed = Driver(variant.listen, model.base_url, WHOLE, CUT)
        again: Driver | None = None
        try:
            await other.wait_for_server_startup(timeout=WAIT, interval=0.2)
            live_run = asyncio.ensure_future(other.run(config, MODEL, SAMPLING, LIVE))
            await eventually(lambda: killed.told("sent", [CUT["id"]]), WAIT, lambda: "the driver's second run sent" + killed.seen())
            await eventually(
                lambda: status_of(CUT) is Status.RUNNING and status_of(LIVE) is Status.RUNNING and status_of(WHOLE) is Status.DONE,
                WAIT, lambda: "the first run done and the held two running in the view" + seen(),
            )  # fmt: skip
            os.kill(killed.process.pid, signal.SIGKILL)
            killed.process.wait(WAIT)
            await eventually(lambda: status_of(CUT) is Status.UNOBSERVED, WAIT, lambda: "the killed driver's run ended in the view" + seen())
            assert driver_left(run_of(CUT).reason), seen()
            again = Driver(variant.listen, model.base_url, AGAIN)
            await eventually(lambda: status_of(AGAIN) is Status.DONE, WAIT, lambda: "the new connection's run done" + again.seen() + seen())
            assert status_of(LIVE) is Status.RUNNING and not live_run.done(), "another connection's run goes on" + seen()
            model.release()
            episode = await asyncio.wait_for(live_run, WAIT)
            assert episode.traces[0].nodes, "the other driver's run ended at its driver"
            await eventually(lambda: status_of(LIVE) is Status.DONE, WAIT, lambda: "the other driver's run done in the view" + seen())
            await eventually(
                lambda: "failed to send response" in server.tail(200_000), WAIT,
                lambda: f"the env server's reply to the killed driver's run, sent to nobody; its log ends {server.tail(2000)!r}",
            )  # fmt: skip
        finally:
            await other.close()
            killed.process.end()
            if again is not None:
                again.process.end()
    assert status_of(CUT) is Status.UNOBSERVED and driver_left(run_of(CUT).reason), "the run's end stays as the view said" + seen()
    (line,) = [line for line in summary_lines(engine) if line.startswith("px:")]
    counts = engine.store.stats("px").counts
    assert counts[Status.DONE] == 3 and counts[Status.UNOBSERVED] == 1, seen()
    assert "3 done, 1 unobserved" in line, line
