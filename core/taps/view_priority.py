"""The proxy's view yields the cores to its forwarding process.

On a box with no core to spare the view (reading the copies, the store, the recorder)
competes with the forwarding process for the same cores, and every slice it takes is
one the forwarder waits out with a driver's frame in hand. Headless, nothing waits on
the view but its printed lines, so it runs at a lower priority (a higher nice value)
than the forwarder, and the driver gets the forwarder's turn first.

Linux keeps a nice value per thread, and whatever a thread starts (a thread or a
process) inherits that thread's. So the forwarding processes are all started from one
thread that is never lowered: one started after the view yielded (a replacement for
one that died) still runs at the app's own priority. Raising a priority again needs a
privilege the app does not have, so that thread must exist before the rest yield.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

VIEW_NICENESS = 10
"""How much lower than the forwarder the view runs: at 10 it gets about a tenth of
the time a busy forwarder gets on a shared core."""

SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forwarder spawner")
"""Where every forwarding process is started: its one thread keeps the app's priority."""

TASKS = "/proc/self/task"


def yield_view(niceness: int = VIEW_NICENESS) -> None:
    """Lower every thread of this process but the spawner's by `niceness` below the
    spawner's own priority (at most once: a second call changes nothing). Threads
    started later inherit their starter's nice value."""
    spared = SPAWNER.submit(threading.get_native_id).result()
    target = min(19, os.getpriority(os.PRIO_PROCESS, spared) + niceness)
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir(TASKS):
            thread = int(entry)
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                if thread != spared and os.getpriority(os.PRIO_PROCESS, thread) < target:
                    os.setpriority(os.PRIO_PROCESS, thread, target)
