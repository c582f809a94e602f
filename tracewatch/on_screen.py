"""The app on the terminal until it quits, and the session shut down however the
screen ended.

An ending signal (`tracewatch.core.engine.ending_signals`) quits as `q` does; before,
SIGTERM and SIGHUP killed the process where it stood and SIGINT ended it by a
traceback, so the recording's rollouts never ended ("running" when opened). The app
runs on a loop kept here, so that when the screen ends any other way (a crash, the
input thread's panic when a terminal hangs up before its SIGHUP is handled) the
session's runs are still on it and are shut down, their endings recorded, before the
command exits.
"""

from __future__ import annotations

import asyncio
import signal

from tracewatch.core.engine.ending_signals import ENDING_SIGNALS, leave_hung_up_terminal
from tracewatch.core.session.contracts import VariantState
from tracewatch.core.session.session import Session
from tracewatch.tui.app import TracewatchApp


def run_on_screen(app: TracewatchApp, session: Session) -> signal.Signals | None:
    """Run the app, then shut the session down (a quit already did: then at once);
    the first ending signal received, if any."""
    received: list[signal.Signals] = []

    def on_signal(signum: signal.Signals) -> None:
        if signum is signal.SIGHUP:
            leave_hung_up_terminal()
        if received:  # again: kill what is still stopping, as headless does
            for variant in session.variants.values():
                if variant.state is VariantState.CANCELLING:
                    variant.cancel()
            return
        received.append(signum)
        app.call_later(app.end_on_signal)

    loop = asyncio.new_event_loop()
    for signum in ENDING_SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        app.run(loop=loop)
        loop.run_until_complete(session.shutdown())
    finally:
        for signum in ENDING_SIGNALS:
            loop.remove_signal_handler(signum)
        loop.close()
    return received[0] if received else None
