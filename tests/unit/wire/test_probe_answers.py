"""What a peer that is not ZMQ answered, said in words (`probe.answered`): an HTTP or
SSH server by its first line, other text by its line, anything else by its size; any
bytes at all give one short printable line."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tracewatch.core.wire.probe import LINE_CHARS, answered


def test_servers_are_named_by_their_first_line() -> None:
    assert answered(b"HTTP/1.0 400 Bad Request\r\nServer: x\r\n\r\n<html>") == "an HTTP server answered 'HTTP/1.0 400 Bad Request'"
    assert answered(b"SSH-2.0-OpenSSH_9.6\r\n") == "an SSH server answered 'SSH-2.0-OpenSSH_9.6'"
    assert answered(b"-ERR unknown command\r\n") == "it answered in text: '-ERR unknown command'"
    assert answered(b"\x00\x01\x02\xfe") == "it answered 4 bytes that are not a ZMQ greeting"
    assert answered(b"") == "it closed the connection"


@given(st.binary(max_size=600) | st.builds(lambda tail: b"HTTP/1.1 " + tail, st.binary(max_size=600)))
def test_any_answer_is_one_short_printable_line(answer: bytes) -> None:
    said = answered(answer)
    assert said.isprintable() and "\n" not in said
    assert len(said) <= LINE_CHARS + 40
