"""Stands in for the app: starts one SupervisedChild, prints the supervisor's pid as
JSON, then waits to be SIGKILLed by the test (so no cleanup of ours can run).

argv[1] is a JSON object of SupervisedChild keyword arguments.
"""

import json
import signal
import sys

from tracewatch.core.supervision.child import SupervisedChild

child = SupervisedChild(**json.loads(sys.argv[1]))
print(json.dumps({"supervisor": child.start()}), flush=True)
while True:
    signal.pause()
