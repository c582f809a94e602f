"""Keypress to repaint through a real terminal: the `tracewatch` command in tmux,
attached to `bench/live.py`'s socket-speed source streaming the demo's `scale`
rollouts (all in flight at once), Down/Up sent every 100 ms while the stream lands,
then the same keys once it has ended (idle), in the same run.

`run_test` times a key from the message it posts to the compositor's frame; a user
waits from the terminal's input to the terminal's screen, through the app's input
parsing, its output's writes and the terminal itself. So here the keys go in through
tmux (`send-keys`), and the repaint is the terminal's output: a tmux control-mode
client hears every byte the app writes (`%output`, stamped as it arrives); after each
write the pane is captured and the cursor's row looked for (found by the cursor
line's background, learned from the first screen). A key's time is from just before
`send-keys` to the write after which the cursor shows on its new row.

    python -m bench.terminal_keys [--rollouts 256 --turns 300 --load-seconds 10]
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.live import LOST_KEY, ROOT, Source, capture, summary, write_config
from tests.support.terminal import Terminal, tracewatch

CAPTURED = 8
"""Distinct rollouts the demo plays; the source replays them for every run."""
KEY_EVERY = 0.1
IDLE_KEYS = 30
SIZE = (160, 48)
STREAM_END = 240.0
"""Longest wait for the stream to end before the idle keys."""
BACKGROUND = re.compile(r"\x1b\[(?:[0-9;]*;)?(48;5;\d+|48;2;\d+;\d+;\d+)")
RUNNING = re.compile(r"(\d+) running")


class ControlClient:
    """A tmux control-mode client: commands in, replies and `%output` notices out,
    read by a thread so each write is stamped as it arrives."""

    def __init__(self, terminal: Terminal) -> None:
        self.process = subprocess.Popen(
            ["tmux", "-L", terminal.socket, "-C", "attach-session", "-t", terminal.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.replies: queue.Queue[list[str]] = queue.Queue()
        self.output = threading.Condition()
        self.writes = 0
        self.last_write = 0.0
        threading.Thread(target=self._read, daemon=True).start()
        self.command("")  # the attach's own reply block

    def _read(self) -> None:
        assert self.process.stdout is not None
        block: list[str] | None = None
        for raw in self.process.stdout:
            if raw.startswith(b"%output"):
                with self.output:
                    self.writes += 1
                    self.last_write = time.perf_counter()
                    self.output.notify_all()
            elif raw.startswith(b"%begin"):
                block = []
            elif raw.startswith((b"%end", b"%error")):
                if block is not None:
                    self.replies.put(block)
                block = None
            elif block is not None:
                block.append(raw.decode(errors="replace").rstrip("\n"))

    def command(self, line: str) -> list[str]:
        assert self.process.stdin is not None
        if line:
            self.process.stdin.write(line.encode() + b"\n")
            self.process.stdin.flush()
        return self.replies.get(timeout=10)

    def screen(self, target: str) -> list[str]:
        return self.command(f"capture-pane -p -e -t {target}")

    def wait_write(self, after: int, until: float) -> int:
        """The count of writes once there is one past `after` (or `until` passes)."""
        with self.output:
            while self.writes <= after and time.perf_counter() < until:
                self.output.wait(until - time.perf_counter())
            return self.writes

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(10)


def unescaped(line: str) -> str:
    """tmux's control mode writes a capture's bytes below 32 as octal."""
    return re.sub(r"\\(\d{3})", lambda match: chr(int(match.group(1), 8)), line)


def header_line(lines: list[str]) -> int | None:
    return next((y for y, line in enumerate(lines) if "Variant" in line and "Task" in line), None)


def first_background(line: str) -> str | None:
    found = BACKGROUND.search(line)
    return found.group(1) if found else None


class Screen:
    """Where the table's cursor is on the pane, by its row's background."""

    def __init__(self, client: ControlClient, target: str) -> None:
        self.client, self.target = client, target
        lines = self.lines()
        header = header_line(lines)
        assert header is not None, "no table header on screen"
        self.header = header
        self.cursor = first_background(lines[header + 1])
        assert self.cursor is not None and self.cursor != first_background(lines[header + 2]), "cannot tell the cursor's row"

    def lines(self) -> list[str]:
        return [unescaped(line) for line in self.client.screen(self.target)]

    def cursor_row(self) -> int | None:
        lines = self.lines()
        for y in range(self.header + 1, len(lines)):
            if first_background(lines[y]) == self.cursor:
                return y - self.header - 1
        return None

    def running(self) -> int:
        found = RUNNING.search(self.lines()[0])
        return int(found.group(1)) if found else 0


def press(client: ControlClient, screen: Screen, target: str, key: str) -> float:
    """Send one key; the time to the terminal write after which its cursor moved."""
    before = screen.cursor_row()
    seen = client.writes
    pressed = time.perf_counter()
    client.command(f"send-keys -t {target} {key}")
    deadline = pressed + LOST_KEY
    while True:
        seen = client.wait_write(seen, deadline)
        if time.perf_counter() >= deadline:
            return LOST_KEY
        moved = screen.cursor_row() != before
        if moved:  # the newest write the capture could show: errs long, never short
            return client.last_write - pressed


def keys_while(client: ControlClient, screen: Screen, target: str, go_on) -> list[float]:  # noqa: ANN001
    times: list[float] = []
    down = True
    while go_on(len(times)):
        times.append(press(client, screen, target, "Down" if down else "Up"))
        down = not down
        time.sleep(KEY_EVERY)
    return times


def measure(args: argparse.Namespace, frames: Path, scratch: Path) -> dict:
    source = Source(frames)
    terminal = Terminal(f"twkeys-{os.getpid()}")
    client: ControlClient | None = None
    try:
        config = write_config(source.address, args.rollouts, args.turns, args.tokens, scratch)
        home = scratch / "home"
        command = f"env TRACEWATCH_HOME={home} {' '.join(tracewatch())} {config}"
        terminal.start(command, ROOT)
        terminal.tmux("set-option", "-t", terminal.name, "window-size", "manual")
        terminal.tmux("resize-window", "-t", terminal.name, "-x", str(SIZE[0]), "-y", str(SIZE[1]))
        launched = time.perf_counter()
        terminal.wait(lambda text: (y := header_line(text.splitlines())) is not None and len(text.splitlines()) > y + 2 and "scale" in text.splitlines()[y + 2], "the table's rows", timeout=60)
        client = ControlClient(terminal)
        screen = Screen(client, terminal.name)
        first_rows = time.perf_counter() - launched
        until = time.perf_counter() + args.load_seconds
        streaming = keys_while(client, screen, terminal.name, lambda _: time.perf_counter() < until)
        running_after = screen.running()
        deadline = time.perf_counter() + STREAM_END
        while screen.running() and time.perf_counter() < deadline:
            time.sleep(0.5)
        ended = not screen.running()
        time.sleep(1.0)  # the last rows' repaints
        idle = keys_while(client, screen, terminal.name, lambda done: done < IDLE_KEYS) if ended else []
        return {"first_rows": first_rows, "streaming": streaming, "running_after": running_after, "idle": idle}
    finally:
        if client is not None:
            client.close()
        terminal.kill()
        source.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--load-seconds", type=float, default=10.0)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "core", "tui"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        frames = Path(scratch) / "frames.msgpack"
        capture(frames, CAPTURED, args.turns, args.tokens)
        result = measure(args, frames, Path(scratch))
    load_after = os.getloadavg()
    print(
        f"{args.rollouts} scale rollouts x {args.turns} turns x {args.tokens} tokens/node, all in flight, the real `tracewatch` in tmux "
        f"{SIZE[0]}x{SIZE[1]}; {os.cpu_count()} cores, load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    print(f"launch to the table's rows in the terminal: {result['first_rows']:.2f} s")
    print(f"keypress to repaint, streaming: {summary(result['streaming'])}; {result['running_after']} rollouts still running after the keys")
    if result["idle"]:
        print(f"keypress to repaint, idle:      {summary(result['idle'])}")
    else:
        print(f"the stream did not end within {STREAM_END:g} s: no idle figure")


if __name__ == "__main__":
    main()
