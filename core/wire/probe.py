"""Who listens at an attached server's address, told apart before the health wait:
nothing (connection refused), a peer that is not ZMQ (an HTTP server, a database), or
a ZMQ peer (whose health answer then says whether it is an env server).

A ZMTP peer starts every connection with a 10-byte signature whose first byte is 0xFF
and last 0x7F (ZMTP 3.x, rfc.zeromq.org/spec/23). We send ours and read what comes
back: a ZMQ peer answers with its own at once, an HTTP server with an error page.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

from tracewatch.core.errors import TracewatchError
from tracewatch.core.text import short_repr

SIGNATURE = b"\xff" + b"\x00" * 8 + b"\x7f"
ANSWER_BYTES = 512
"""Read of a peer's first answer: an HTTP status line or an SSH banner fits."""
LINE_CHARS = 80


@dataclass(frozen=True)
class Probe:
    listening: bool
    zmq: bool
    detail: str
    """What was found, in words a user can act on."""


async def probe(host: str, port: int, timeout: float = 2.0) -> Probe:
    """Connect to host:port, greet as ZMTP, and say what answered."""
    where = f"{host}:{port}"
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except ConnectionRefusedError:
        return Probe(False, False, f"nothing listens at {where} (connection refused)")
    except (OSError, TimeoutError) as error:
        return Probe(False, False, f"cannot connect to {where}: {error or type(error).__name__}")
    try:
        writer.write(SIGNATURE)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(ANSWER_BYTES), timeout)
    except TimeoutError:
        answer = None
    except OSError as error:
        return Probe(True, False, f"{where} accepted, then dropped the connection ({error}): not a ZMQ env server")
    finally:
        writer.close()
    if answer is None:
        return Probe(True, False, f"{where} accepted the connection but sent no ZMQ greeting within {timeout:g}s: not a ZMQ env server")
    if answer[:1] == SIGNATURE[:1]:
        return Probe(True, True, f"a ZMQ peer listens at {where}")
    return Probe(True, False, f"something at {where} is not a ZMQ env server ({answered(answer)})")


def answered(answer: bytes) -> str:
    """What a peer that is not ZMQ answered, in words: an HTTP or SSH server by its
    first line (its status, its version), other text by its first line, else its size;
    never a cut bytes literal such as `b'HTTP/1.0 4'` that a user has to decode."""
    if not answer:
        return "it closed the connection"
    line = answer.split(b"\n", 1)[0].strip().decode("ascii", "replace")
    printable = line.isprintable() and line.isascii()
    if answer.startswith(b"HTTP/") and printable:
        return f"an HTTP server answered {short_repr(line, LINE_CHARS)}"
    if answer.startswith(b"SSH-") and printable:
        return f"an SSH server answered {short_repr(line, LINE_CHARS)}"
    if printable and line:
        return f"it answered in text: {short_repr(line, LINE_CHARS)}"
    return f"it answered {len(answer)} bytes that are not a ZMQ greeting"


class NothingListens(TracewatchError, OSError):
    """Nothing listens at an address given on the command line."""


def check_listening(address: str, advice: str, timeout: float = 2.0) -> None:
    """Refuse at once an address (`tcp://HOST:PORT`) where nothing listens at all: one
    message naming it and what to do (`advice`), before any rollout is queued, rather
    than a session of runs that were never sent."""
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except (OSError, ValueError) as error:
        raise NothingListens(f"nothing listens at {address} ({error}): {advice}") from None
