"""The relay lives in the driver's process: whatever its viewers do (fall behind, stop,
send garbage, or none is there), it forwards what the driver's client received as it
came, holds a bounded number of bytes, answers only viewers that said hello, and lets
the driver close it at once."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient
from verifiers.v1.types import SamplingConfig

from tests.support.polling import MARGIN, eventually, wait_until
from tests.support.relay_driver import LIVE_ERROR
from tests.support.repo import FIXTURE
from tests.support.scripted_server import ScriptedServer
from tests.support.tether import TetheredProcess, run_tethered
from tracewatch.core.taps.relay_viewer import SILENT_BEATS, unbatch
from tracewatch_guest.framing import BATCH, DELTA, HELLO, REPLY, WELCOME
from tracewatch_guest.relay import HEARTBEAT_SECONDS, TICK_SECONDS
from tracewatch_relay import Relay, RelayedClient

WAIT = 60.0
MB = 2**20


class BareViewer:
    """A viewer as the wire sees it: a DEALER that said hello, and what it received."""

    def __init__(self, address: str, identity: bytes | None = None, receive_queue: int | None = None) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        if receive_queue is not None:  # messages its zmq takes in unread: past them, the socket stops reading
            self.socket.setsockopt(zmq.RCVHWM, receive_queue)
            self.socket.setsockopt(zmq.RCVBUF, 4096)
        if identity is not None:
            self.socket.setsockopt(zmq.IDENTITY, identity)
        self.socket.connect(address)
        self.welcomes = 0
        self.heartbeats = 0
        """Empty batches: the relay saying it is still there."""
        self.messages: list[tuple[bytes, bytes, bytes]] = []
        """Every message of every batch, in order."""

    def hello(self) -> None:
        self.socket.send_multipart([HELLO])

    def welcomed(self) -> None:
        """Say hello and wait for the relay's welcome."""
        self.hello()
        wait_until(lambda: self.read() or self.welcomes, WAIT, "the viewer welcomed")

    def read(self) -> None:
        while self.socket.poll(0):
            frames = self.socket.recv_multipart()
            if frames[0] == WELCOME:
                self.welcomes += 1
            elif frames[0] == BATCH:
                batch = unbatch(frames[2])
                self.messages += batch
                self.heartbeats += not batch

    def close(self) -> None:
        self.socket.close(0)
        self.context.term()


def single_float_run() -> tuple[list[bytes], dict]:
    """verifiers 0.4.0's recorded run0, its deltas packed with 32-bit floats: packing
    what a client decoded (64-bit floats) gives other bytes than the server sent."""
    records = [json.loads(line) for line in (FIXTURE / "deltas.jsonl").read_text().splitlines()]
    frames = [msgpack.packb(r["delta"], use_bin_type=True, use_single_float=True) for r in records if r["request"] == "run0"]
    reply = next(r["reply"] for r in json.loads((FIXTURE / "replies.json").read_text()) if r["request"] == "run0")
    return frames, reply


async def test_relayed_client_forwards_the_bytes_its_server_sent() -> None:
    """A viewer gets each delta as the driver's client received it, not packed again
    from what the client decoded (the driver's thread only hands a reference over)."""
    frames, reply = single_float_run()
    async with ScriptedServer({"a": [*(("delta", frame) for frame in frames), ("reply", reply)]}) as server:
        relay = Relay("tcp://127.0.0.1:0")
        viewer = BareViewer(relay.address)
        client = RelayedClient(EnvClient(server.address), relay)
        try:
            viewer.hello()
            await eventually(lambda: viewer.read() or viewer.welcomes, WAIT, "the viewer welcomed")
            seen: list[dict] = []
            episode = await client.run(EvalClientConfig(), "m", SamplingConfig(), {"id": "a"}, on_delta=seen.append)
            await eventually(lambda: viewer.read() or any(kind == REPLY for kind, _, _ in viewer.messages), WAIT, "the run's end relayed")
        finally:
            await client.close()
            relay.close()
            viewer.close()
    assert [payload for kind, _, payload in viewer.messages if kind == DELTA] == frames
    assert len(seen) == len(frames) and episode.traces[0].id == reply["traces"][0]["id"]


class Said:
    """What a child process prints, line by line, read on a thread of its own: a test
    waits for a line with a deadline, and its failure says what was printed."""

    def __init__(self, proc: TetheredProcess) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.answered = 0
        assert proc.stdout is not None
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, out) -> None:
        for line in out:
            self.lines.append(line.rstrip("\n"))

    def line(self, matches: Callable[[str], bool], what: str) -> str:
        def found() -> str | None:
            if (line := next((line for line in list(self.lines) if matches(line)), None)) is not None:
                return line
            assert self.proc.poll() is None, f"{what}: the process ended (status {self.proc.poll()}); it said {self.lines[-15:]}"
            return None

        return wait_until(found, WAIT, lambda: f"{what}; it said {self.lines[-15:]}")

    def next_line(self, what: str) -> str:
        """The next line it prints, each once, in order (a process that answers a line a command)."""
        index = self.answered
        self.answered += 1
        self.line(lambda line: len(self.lines) > index, what)
        return self.lines[index]


class StoppedViewer:
    """A driver with a relay, a headless viewer of it that sees a live run begin and is
    then suspended (SIGSTOP) while the driver relays a run of 300 MB."""

    def __init__(self) -> None:
        self.driver = TetheredProcess(
            [sys.executable, "-m", "tests.support.relay_driver", str(16 * MB), "3000", "100000"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.viewer: TetheredProcess | None = None
        self.answers = Said(self.driver)
        self.address = self.answers.next_line("the relay's address")

    def tell(self, command: str) -> dict:
        """The driver's answer to a command, within the deadline."""
        assert self.driver.stdin is not None
        self.driver.stdin.write(command + "\n")
        self.driver.stdin.flush()
        return json.loads(self.answers.next_line(f"the driver's answer to {command!r}"))

    def start(self, record: Path | None = None) -> Said:
        recording = ["--record", str(record)] if record is not None else ["--no-record"]
        self.viewer = TetheredProcess(
            [sys.executable, "-m", "tracewatch.cli", "tap", self.address, "--name", "v", "--headless", *recording],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        said = Said(self.viewer)
        said.line(lambda line: line.startswith("v: running"), "the viewer welcomed")
        self.tell("live")
        said.line(lambda line: "[live" in line and "running" in line, "the live run seen running")
        self.viewer.send_signal(signal.SIGSTOP)
        return said

    def stop(self) -> None:
        """SIGINT to the viewer: it prints its summary and exits."""
        assert self.viewer is not None
        self.viewer.send_signal(signal.SIGINT)
        self.viewer.wait(WAIT)

    def end(self) -> None:
        for proc in (self.driver, self.viewer):
            if proc is not None:
                proc.send_signal(signal.SIGCONT)
                proc.end()


def missed_the_big_run(line: str) -> bool:
    return "[big" in line and re.search(r"unobserved .* view incomplete: the relay dropped [\d,]+ messages for this viewer, the run's end among them", line) is not None


def test_a_stopped_viewer_never_grows_the_driver_and_is_told_what_it_missed() -> None:
    """A viewer suspended (SIGSTOP) while the driver relays 300 MB: the driver's memory
    stays within the relay's bound, the relay counts what it dropped for the viewer,
    and the viewer, resumed after the run ended, is told at once (no other message
    needs to come): the run it missed the end of ends incomplete, and the run that
    is still live goes on and ends as its driver ends it."""
    setup = StoppedViewer()
    try:
        said = setup.start()
        measured = setup.tell("go")
        assert setup.viewer is not None
        setup.viewer.send_signal(signal.SIGCONT)
        said.line(missed_the_big_run, "the resumed viewer ending the big run, incomplete")
        assert not any("[live" in line and "unobserved" in line for line in said.lines), "\n".join(said.lines)
        setup.tell("finish")
        live = said.line(lambda line: "[live" in line and "failed" in line, "the live run ended as its driver ended it")
        setup.stop()
        said.line(lambda line: line.startswith("v: ") and "the relay dropped" in line and "messages for this viewer" in line, "the summary's count")
    finally:
        setup.end()
    assert measured["dropped_for_viewers"] > 0
    assert measured["peak"] - measured["before"] < 100 * MB, measured
    assert LIVE_ERROR in live and "view incomplete" not in live


def test_a_viewer_stopped_for_longer_than_its_silence_window_does_not_call_a_live_relay_gone() -> None:
    """A viewer suspended (SIGSTOP) for longer than the silence that says a relay is
    gone, its driver suspended with it and resumed a moment after it (a heartbeat on
    its way in as the viewer wakes): the viewer counts silence only while it was awake
    to hear, so it says nothing went silent, and its live run goes on and ends as its
    driver ends it. Before, the wait that spanned the stop timed out at the resume and
    the viewer, unless it had been stopped for two silences or more, called the relay
    gone and ended the live run as lost (one loaded run in a few of the test above)."""
    setup = StoppedViewer()
    try:
        said = setup.start()
        setup.driver.send_signal(signal.SIGSTOP)
        time.sleep(1.5 * SILENT_BEATS * HEARTBEAT_SECONDS)  # how long both stay stopped: the input, not a wait
        assert setup.viewer is not None
        setup.viewer.send_signal(signal.SIGCONT)
        time.sleep(HEARTBEAT_SECONDS / 2)  # the viewer awake, its driver not yet: less than a silence
        setup.driver.send_signal(signal.SIGCONT)
        setup.tell("finish")
        live = said.line(lambda line: "[live" in line and ("failed" in line or "unobserved" in line), "the live run ended")
        setup.stop()
    finally:
        setup.end()
    assert LIVE_ERROR in live and "failed" in live, said.lines
    assert not any("went silent" in line or "went away" in line for line in said.lines), said.lines


def test_the_recording_of_a_stopped_viewer_ends_the_runs_as_the_resumed_viewer_did(tmp_path) -> None:
    """The recording a stopped viewer writes, opened afterwards, ends the runs as the
    resumed viewer did: the run whose end was dropped incomplete, with what was lost,
    the live run as its driver ended it."""
    recording = tmp_path / "stopped.twrec"
    setup = StoppedViewer()
    try:
        said = setup.start(record=recording)
        setup.tell("go")
        assert setup.viewer is not None
        setup.viewer.send_signal(signal.SIGCONT)
        said.line(missed_the_big_run, "the resumed viewer ending the big run, incomplete")
        setup.tell("finish")
        live = said.line(lambda line: "[live" in line and "failed" in line, "the live run ended as its driver ended it")
        setup.stop()
    finally:
        setup.end()
    opened = run_tethered(
        [sys.executable, "-m", "tracewatch.cli", "open", str(recording), "--headless"], capture_output=True, text=True, timeout=WAIT
    )
    lines = opened.stdout.splitlines()
    assert any(missed_the_big_run(line) for line in lines), opened.stdout + opened.stderr
    assert any("[live" in line and LIVE_ERROR in line and "view incomplete" not in line for line in lines), opened.stdout
    assert LIVE_ERROR in live


def test_a_viewer_resumed_after_its_relay_closed_is_told_what_it_missed() -> None:
    """The relay closes while its viewer is suspended, the big run's end among what it
    dropped or never sent: the viewer, resumed, hears of the close on the relay's
    notices (its data, discarded at the close, may never come, the big run's start
    with it) and says so with the count; a big run it did see ends unobserved, and the
    run still running at the close ends lost with the relay, never called incomplete."""
    setup = StoppedViewer()
    try:
        said = setup.start()
        setup.tell("go")
        setup.tell("close")
        assert setup.viewer is not None
        setup.viewer.send_signal(signal.SIGCONT)
        said.line(
            lambda line: re.match(r"v: the relay at .* went away \(it closed; the relay dropped [\d,]+ messages for this viewer\)", line) is not None,
            "the resumed viewer saying the relay closed, and what it dropped",
        )
        if any("[big" in line for line in said.lines):  # its start reached the viewer before the close
            # incomplete, or lost with the relay if its silence was noticed first
            said.line(lambda line: "[big" in line and "unobserved" in line, "the big run ended, unobserved")
        setup.stop()
        said.line(lambda line: line.startswith("v: ") and "the relay dropped" in line and "messages for this viewer" in line, "the summary's count")
    finally:
        setup.end()
    assert not any("[live" in line and "view incomplete" in line for line in said.lines), said.lines


def test_a_huge_run_costs_a_driver_without_viewers_no_more_than_the_relay_holds() -> None:
    """No viewer: a run of 300 MB of deltas is kept for late viewers only up to the
    bound (then skipped, and counted), never packed whole in the driver."""
    driver = TetheredProcess(
        [sys.executable, "-m", "tests.support.relay_driver", str(16 * MB), "3000", "100000"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert driver.stdout is not None and driver.stdin is not None
        driver.stdout.readline()
        driver.stdin.write("go\n")
        driver.stdin.flush()
        measured = json.loads(driver.stdout.readline())
        driver.stdin.write("close\n")
        driver.stdin.flush()
        closed = json.loads(driver.stdout.readline())
    finally:
        driver.end()
    assert measured["peak"] - measured["before"] < 100 * MB, measured
    assert closed["unsent"] == 0


GARBAGE = st.lists(st.binary(max_size=40), min_size=1, max_size=4).filter(lambda frames: frames not in ([HELLO], [b"bye"]))


@pytest.fixture(scope="module")
def run_in_flight():
    relay = Relay("tcp://127.0.0.1:0")
    on_delta = relay.begin({"id": "a", "prompt": "p"}, model="m")
    on_delta({"trace": "t", "open": {"id": "t"}})
    for i in range(50):
        on_delta({"trace": "t", "set": {"i": i}})
    yield relay
    relay.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.lists(GARBAGE, min_size=1, max_size=20))
def test_a_peer_that_sends_garbage_is_not_a_viewer(run_in_flight: Relay, garbage: list[list[bytes]]) -> None:
    """Whatever a DEALER sends that is not a hello, the relay counts and ignores: no
    welcome, no run in flight sent to it, and it never becomes a viewer."""
    relay = run_in_flight
    attacker = BareViewer(relay.address)
    try:
        counted = relay.garbage
        for frames in garbage:
            attacker.socket.send_multipart(frames)
        wait_until(lambda: relay.garbage >= counted + len(garbage), WAIT, "every garbage message counted")
        attacker.read()
        assert attacker.welcomes == 0 and attacker.messages == [] and relay.viewers == 0
    finally:
        attacker.close()


def test_each_viewer_is_sent_the_runs_in_flight_once_however_often_it_says_hello(run_in_flight: Relay) -> None:
    relay = run_in_flight
    viewers = [BareViewer(relay.address, identity=f"viewer-{i}".encode()) for i in range(6)]
    garbage = relay.garbage
    try:
        for _ in range(5):
            for viewer in viewers:
                viewer.hello()

        def everyone_welcomed() -> bool:
            for viewer in viewers:
                viewer.read()
                if not viewer.welcomes:
                    viewer.hello()  # a relay welcomes a few a second: the others say it again
            return all(viewer.welcomes for viewer in viewers)

        wait_until(everyone_welcomed, WAIT, "every viewer welcomed")
        wait_until(lambda: all(viewer.read() or len(viewer.messages) >= 52 for viewer in viewers), WAIT, "the run in flight sent")
        for viewer in viewers:
            viewer.hello()
        on_delta_marker = relay.begin({"id": "marker"})
        wait_until(lambda: all(viewer.read() or any(kind == b"begin" and run == on_delta_marker.run for kind, run, _ in viewer.messages) for viewer in viewers), WAIT)
        for viewer in viewers:
            assert viewer.welcomes == 1
            assert len(viewer.messages) == 53  # the run in flight (begin and 51 deltas), then the marker's begin
        assert relay.garbage == garbage
    finally:
        for viewer in viewers:
            viewer.socket.send_multipart([b"bye"])
            viewer.close()


def test_close_returns_within_its_bound_and_counts_what_it_left() -> None:
    """A viewer that reads nothing and a backlog of 100,000 messages: `close` keeps
    the driver no longer than its bound (plus the slack a loaded machine may take to
    schedule it; without the bound it would wait for the viewer for ever), and counts
    what it did not send."""
    relay = Relay("tcp://127.0.0.1:0")
    viewer = BareViewer(relay.address)
    try:
        viewer.welcomed()
        on_delta = relay.begin({"id": "a"})
        for i in range(100_000):
            on_delta({"trace": "t", "set": {"i": i, "text": "y" * 100}})
        started = time.monotonic()
        unsent = relay.close(timeout=0.1)
        took = time.monotonic() - started
    finally:
        viewer.close()
    assert took < 0.1 + TICK_SECONDS + MARGIN, f"close(timeout=0.1) took {took:.1f}s"
    assert unsent > 0 and relay.unsent == unsent


def wakeups(thread_id: int) -> int:
    """How often a thread of this process gave up its core to wait (it sleeps, then wakes)."""
    with open(f"/proc/self/task/{thread_id}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt_switches"))


WAKEUPS_PER_HEARTBEAT = 5
"""A relay that sleeps until a heartbeat is due wakes once or twice per heartbeat (once
per viewer); one that polls on a clock of its own wakes every tick, many times more."""


def assert_asleep_between_heartbeats(relay: Relay, viewer: BareViewer) -> None:
    """Over a quiet that lasts until `viewer` heard two heartbeats, the relay thread woke
    a few times per heartbeat it sent: counted in heartbeats, not seconds, so a loaded
    machine that stretches the quiet stretches both alike."""
    assert relay._thread.native_id is not None
    before, beats = wakeups(relay._thread.native_id), viewer.heartbeats
    wait_until(lambda: viewer.read() or viewer.heartbeats >= beats + 2, WAIT, "two heartbeats in the quiet", every=0.2)
    quiet = wakeups(relay._thread.native_id) - before
    viewer.read()  # what was sent by the count, less what is still on its way
    heard = viewer.heartbeats - beats
    assert quiet < WAKEUPS_PER_HEARTBEAT * (heard + 2), f"the relay thread woke {quiet} times while {heard} heartbeats came"


def test_a_relay_with_nothing_to_send_sleeps_until_the_driver_offers_or_a_heartbeat_is_due() -> None:
    """Between runs the relay's thread waits for the driver or a viewer's heartbeat, not
    on a clock of its own: a driver's relay costs it nothing while it does other work,
    and a delta offered after a long quiet still reaches the viewer at once."""
    relay = Relay("tcp://127.0.0.1:0")
    viewer = BareViewer(relay.address)
    try:
        viewer.welcomed()
        on_delta = relay.begin({"id": "a"})
        on_delta({"trace": "t", "open": {"id": "t"}})
        wait_until(lambda: viewer.read() or len(viewer.messages) == 2, WAIT, "the run relayed")
        assert_asleep_between_heartbeats(relay, viewer)
        on_delta({"trace": "t", "set": {"after": "the quiet"}})
        wait_until(lambda: viewer.read() or len(viewer.messages) == 3, WAIT, "the delta after the quiet relayed")
    finally:
        viewer.close()
        relay.close()


def test_a_viewer_that_stopped_reading_does_not_keep_the_relay_awake() -> None:
    """A viewer that said hello and never reads again holds half of what the relay may
    hold; a second viewer joins, so that is over the first one's share and the
    heartbeats due to it are dropped too: the relay's thread still waits a heartbeat
    between them rather than trying again at once (each try takes the GIL from the
    driver)."""
    relay = Relay("tcp://127.0.0.1:0", max_bytes=MB)
    stuck, other = BareViewer(relay.address, receive_queue=1), BareViewer(relay.address)
    try:
        stuck.welcomed()
        on_delta = relay.begin({"id": "a"})

        def offer() -> None:  # a batch at a time: one larger than the viewer's share is dropped whole
            for i in range(5):
                on_delta({"trace": "t", "set": {"i": i, "text": "y" * 10_000}})
            wait_until(lambda: not relay._queue, WAIT, "the driver's deltas taken")

        def over_a_second_viewers_share() -> bool:
            return any(v.held > relay.max_bytes // 2 // 2 for v in list(relay._viewers.values()))

        # until a batch is dropped for it: what it holds is near its share and stays (its buffers are full)
        wait_until(lambda: offer() or any(v.dropped for v in list(relay._viewers.values())), WAIT, "the unread viewer's share full")
        other.welcomed()
        assert over_a_second_viewers_share()
        assert_asleep_between_heartbeats(relay, other)
    finally:
        stuck.close()
        other.close()
        relay.close()


def test_a_batch_buffer_is_packed_into_again_only_once_every_viewer_was_sent_it() -> None:
    """The relay packs each batch into a buffer an earlier batch used: a viewer that
    stopped reading holds its batches unsent in zmq while another viewer takes batch
    after batch, and when it reads again every delta it gets is the one sent, in
    order (a buffer packed into while zmq still held it would give it later bytes)."""
    relay = Relay("tcp://127.0.0.1:0", max_bytes=256 * MB)  # the slow viewer's 16 MB held, never dropped
    fast = BareViewer(relay.address, identity=b"fast")
    slow = BareViewer(relay.address, identity=b"slow", receive_queue=1)
    sent: list[bytes] = []

    def deltas(viewer: BareViewer) -> list[bytes]:
        viewer.read()
        return [payload for kind, _, payload in viewer.messages if kind == DELTA]

    try:
        fast.welcomed()
        slow.welcomed()
        run = relay.begin({"id": "a"})
        for batch in range(40):  # a batch a round: the fast viewer has each before the next is offered
            for i in range(50):  # 400 kB a round: more than the sockets' buffers hold, so zmq holds the slow one's
                payload = msgpack.packb({"trace": "t", "set": {"n": f"{batch}/{i}", "text": f"{batch}/{i} ".rjust(8000, ".")}})
                run.raw(payload)
                sent.append(payload)
            wait_until(lambda: len(deltas(fast)) == len(sent), WAIT, "the round at the fast viewer")
        wait_until(lambda: len(deltas(slow)) == len(sent), WAIT, "every round at the slow viewer, read at last")
        got = {viewer.socket.identity: deltas(viewer) for viewer in (fast, slow)}
    finally:
        relay.close()
        fast.close()
        slow.close()
    assert got == {b"fast": sent, b"slow": sent}
