"""Free ports on the loopback, for a server we start with a port of our choosing.

A free port is only a guess: it is free when we look, and another process can bind it
before our server does. So whoever uses one retries with another when it turns out
taken (`port_taken` tells the two failures apart), at most `PORT_ATTEMPTS` times.
"""

from __future__ import annotations

import errno
import socket

from tracewatch.core.errors import TracewatchError

LOOPBACK = "127.0.0.1"

PORT_ATTEMPTS = 5
"""Ports tried in a row before giving up: losing one is rare, losing five is not luck."""


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick of an ephemeral one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def free_address() -> str:
    """`tcp://127.0.0.1:PORT` on a `free_port`."""
    return f"tcp://{LOOPBACK}:{free_port()}"


def port_taken(port: int) -> bool:
    """Whether another socket holds the port (one of ours that closed and lingers in
    TIME_WAIT does not count: the probe reuses the address as a server would)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOOPBACK, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return True
            raise
        return False


class PortsTaken(TracewatchError, RuntimeError):
    """Every port tried was taken by another process before our server bound it."""

    def __init__(self, ports: list[int]) -> None:
        super().__init__(
            f"the server could not listen: {len(ports)} free ports in a row "
            f"({', '.join(map(str, ports))}) were taken by another process before it bound them"
        )
