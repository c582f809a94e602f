"""Drawing on a terminal that hung up (a closed tmux session, an ssh connection gone):
it answers every read and write with EIO. Textual's writer thread dies on the first
such write, and the app's next frames fill the thread's queue until the app blocks on
it for ever, so the SIGHUP that follows is never handled, the session never ends its
rollouts and the process never exits; its input thread's failed read ends the app by a
panic. Here a write that fails is dropped and a read that fails ends the reading: the
frames go nowhere, no key comes, and the app runs on to the signal's quit."""

from __future__ import annotations

from typing import Any, TextIO

from textual.app import App
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver


class _Dropping:
    """The terminal's output, with failed writes dropped."""

    def __init__(self, file: TextIO) -> None:
        self._file = file

    def write(self, text: str) -> None:
        try:
            self._file.write(text)
        except OSError:
            pass

    def flush(self) -> None:
        try:
            self._file.flush()
        except OSError:
            pass

    def fileno(self) -> int:
        return self._file.fileno()


class HungUpTolerantDriver(LinuxDriver):
    def __init__(self, app: App[Any], **options: Any) -> None:
        super().__init__(app, **options)
        self._file = _Dropping(self._file)  # type: ignore[arg-type,assignment]

    def run_input_thread(self) -> None:
        try:
            super().run_input_thread()
        except OSError:  # the terminal hung up: no key will come again
            pass


def tolerant(driver: type[Driver]) -> type[Driver]:
    """The driver to draw with: Linux's made to outlive its terminal, any other as it is."""
    return HungUpTolerantDriver if driver is LinuxDriver else driver
