"""The signals that end a session, on the screen or headless, as `q` or the end of the
runs does: every run cancelled and its ending recorded, every server stopped, the
summary written, exit status 128 + the signal.

SIGHUP is what a closed terminal (a closed tmux session, an ssh connection gone) sends,
and after it the terminal answers every write with EIO: a headless line, or the lines
printed after the screen closes, would raise. So on a hangup the output descriptors that
are character devices (a hung-up terminal no longer says it is one: `isatty` is false)
are pointed at /dev/null; a log file or a pipe is kept. (The screen's own writes and
reads of a hung-up terminal are `tracewatch.tui.drawing.hung_up_terminal`'s.)
"""

from __future__ import annotations

import os
import signal
import stat

ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def leave_hung_up_terminal() -> None:
    """After SIGHUP: standard output and error no longer reach the terminal, so
    nothing written to them fails."""
    for fd in (1, 2):
        try:
            if not stat.S_ISCHR(os.fstat(fd).st_mode):
                continue
        except OSError:  # closed: nothing writes to it
            continue
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
