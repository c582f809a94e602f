"""A command for the supervision tests to start, signal and kill.

Prints `child <pid>`, one `grandchild <pid>` per spawned `sleep` and one `escapee <pid>`
per `sleep` that left the process group with setsid(), then `ready`, then waits for a
signal. --on-term picks what SIGTERM does: `default` (die by it),
`exit130` (exit 130, as verifiers' CLI does after a clean teardown) or `ignore`
(grandchildren inherit the ignore, so only SIGKILL stops anyone).
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--on-term", choices=("default", "exit130", "ignore"), default="default")
parser.add_argument("--grandchildren", type=int, default=0)
parser.add_argument("--escapees", type=int, default=0, help="grandchildren that call setsid()")
parser.add_argument("--exit", type=int, default=None, help="exit at once with this code")
parser.add_argument("--print-env", default=None, help="print this environment variable")
args = parser.parse_args()

if args.on_term == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif args.on_term == "exit130":
    signal.signal(signal.SIGTERM, lambda *_: os._exit(130))

print(f"child {os.getpid()}", flush=True)
if args.print_env:
    print(f"env {os.environ.get(args.print_env)}", flush=True)
for _ in range(args.grandchildren):
    sleeper = subprocess.Popen([shutil.which("sleep"), "300"])
    print(f"grandchild {sleeper.pid}", flush=True)
for _ in range(args.escapees):
    escapee = subprocess.Popen([shutil.which("sleep"), "300"], start_new_session=True)
    print(f"escapee {escapee.pid}", flush=True)
print("ready", flush=True)
if args.exit is not None:
    sys.exit(args.exit)
while True:
    signal.pause()
