"""The eval tap in a program that forks (vf-eval and verifiers' env servers may fork
workers): the child inherits the tap's sender as it stood at the fork, its lock held
by a loss thread the child does not have among it."""

from __future__ import annotations

import json
import os
import sys

import msgpack
import zmq

from tests.support.polling import wait_until
from tests.support.tether import run_tethered
from tracewatch.core.taps.eval_variant import INJECT_DIR
from tracewatch_guest import framing

WAIT = 60.0

FORKING_EVAL = """
import json, os, sys, threading, time
import sitecustomize  # the eval tap itself, first on the PYTHONPATH tracewatch gives the eval
from tracewatch_guest import framing

wait = float(sys.argv[1])
sender = sitecustomize._connect()
holding, forked = threading.Event(), threading.Event()
tell = sender._tell_loss


def held():
    holding.set()
    forked.wait()  # the loss thread keeps the lock until the child is done
    return tell()


sender._tell_loss = held
with sender._lock:
    sender._drop(b"parent-run")  # a message of a run dropped: the loss thread starts to tell it
if not holding.wait(wait):
    sys.exit("the loss thread never took the lock")
child = os.fork()
if child == 0:
    run = sender.new_run()
    sender.send(framing.BEGIN, run, sender.packed(framing.begin_payload({"id": "child", "prompt": "p"}, "m", None)))
    sender.send(framing.REPLY, run, sender.packed(framing.failed_reply("the child's run ended")))
    sys.exit(0)
ends = time.monotonic() + wait
while (ended := os.waitpid(child, os.WNOHANG)) == (0, 0) and time.monotonic() < ends:
    time.sleep(0.05)
if ended == (0, 0):
    os.kill(child, 9)
    os.waitpid(child, 0)
forked.set()
print(json.dumps({"child": child, "exit": None if ended == (0, 0) else os.waitstatus_to_exitcode(ended[1]), "parent": os.getpid()}))
"""


def test_a_child_forked_while_the_loss_thread_holds_the_lock_sends_and_exits() -> None:
    """The eval forks while the tap's loss thread holds its lock: the child sends its
    own run (its hello first, its own counts, its runs named apart from the
    parent's) and exits by itself, and the parent's loss is still told."""
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    pull.bind("tcp://127.0.0.1:*")
    received: list[framing.Message] = []

    def read() -> None:
        while pull.poll(0):
            if (message := framing.decode(pull.recv_multipart())) is not None:
                received.append(message)

    try:
        env = {**os.environ, "PYTHONPATH": str(INJECT_DIR), framing.ADDRESS_VAR: pull.getsockopt_string(zmq.LAST_ENDPOINT)}
        ran = run_tethered([sys.executable, "-c", FORKING_EVAL, str(WAIT)], env=env, capture_output=True, text=True, timeout=3 * WAIT)
        assert ran.returncode == 0, ran.stderr
        pids = json.loads(ran.stdout)
        assert pids["exit"] == 0, f"the forked child never exited by itself (killed after {WAIT:g}s); {ran.stderr}"
        child_run = f"{pids['child']}.0".encode()

        def arrived() -> bool:
            read()
            kinds = {(m.kind, m.run) for m in received}
            return {(framing.REPLY, child_run), (framing.LOSS, framing.NO_RUN)} <= kinds

        wait_until(arrived, WAIT, lambda: f"the child's run and the parent's loss; received {[(m.kind, m.run, m.dropped) for m in received]}")
    finally:
        pull.close()
        context.term()
    hellos = {msgpack.unpackb(m.payload)["pid"]: m.dropped for m in received if m.kind == framing.HELLO}
    assert hellos == {pids["parent"]: 0, pids["child"]: 0}, hellos
    childs = [(m.kind, m.dropped) for m in received if m.run == child_run]
    assert childs == [(framing.BEGIN, 0), (framing.REPLY, 0)], childs  # its own count: the parent's drop is not its
    (loss,) = [m for m in received if m.kind == framing.LOSS]
    assert msgpack.unpackb(loss.payload)["lost"] == [b"parent-run"] and loss.dropped == 1

