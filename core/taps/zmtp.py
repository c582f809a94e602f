"""Reading the ZMTP 3 byte stream of one direction of one connection, chunk by chunk.

The proxy relays bytes, not messages (a burst of frames costs one receive and one
send, not one Python step per frame), so whoever wants the messages reads them out
of the bytes: the forwarder only finds where messages begin (to count them, and to
know where the view may pick up again after copies were dropped), the view reads
them whole. Commands (the handshake's READY, heartbeats) are passed over.
"""

from __future__ import annotations

GREETING = 64
"""Signature (10), version (2), mechanism (20), as-server (1), filler (31)."""
MORE, LONG, COMMAND = 1, 2, 4


class ZmtpStream:
    """One direction of one connection. `keep`: read whole messages (the view);
    otherwise only find message starts, passing frame bodies over unread."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.unreadable: str | None = None
        """Why this stream cannot be read (not ZMTP 3, or encrypted); bytes still flow."""
        self.in_message = False
        """A message's first frame header was seen, its last not yet."""
        self.under_way = False
        """A message's first byte was seen, its last not yet (`in_message`, or in the
        middle of a message's last frame)."""
        self.commanded = False
        """A command frame began (the handshake's READY comes first after the greeting)."""
        self._greeting = bytearray()
        self._buffer = bytearray()
        self._skip = 0
        self._frames: list[bytes] = []

    def resume(self) -> list[bytes | None]:
        """Bytes were lost: what follows starts between two messages, after the
        handshake; a message cut short is forgotten. Its first frame (a run's
        request id; None if that was not read), if one was cut short."""
        cut: list[bytes | None] = [self._frames[0]] if self._frames else [None] if self._buffer or self._skip else []
        self._greeting = bytearray(GREETING)
        self._buffer.clear()
        self._skip = 0
        self._frames = []
        self.in_message = self.under_way = False
        return cut

    @property
    def held(self) -> bytes:
        """Bytes a scan read up to but not past (a frame header or a message's short
        first frame, cut short): the next scan reads them again, before its data."""
        return bytes(self._buffer) if not self.keep else b""

    @property
    def between_messages(self) -> bool:
        """Past the handshake and between two frames of no message: a whole message
        put on the connection here reads as one to its receiver."""
        return (
            self.unreadable is None
            and self.commanded
            and len(self._greeting) == GREETING
            and not (self._skip or self._buffer or self.in_message)
        )

    def scan(
        self, data: bytes, firsts: list[bytes | None] | None = None, offsets: list[int] | None = None
    ) -> tuple[int, int | None, int]:
        """Read `held` and then `data`, as one run of bytes, up to what is `held` after
        it: a message's first frame (a short one: a run's request id) is read whole
        before its message counts, so every message is known by its request id in the
        bytes it begins in, and those bytes never end inside that frame. Returns the
        messages that begin in the bytes read; the first offset in them where a
        reader may start (a frame header between two messages), if any; and how many
        of those messages begin before that offset (all of them, if there is none).
        With `firsts`, each of those messages' first frame is added to it (None only
        for a long first frame that does not end there); with `offsets`, where each
        begins."""
        if self.keep:
            raise ValueError("a keeping stream reads with feed()")
        return self._walk(data, None, firsts, offsets)

    def feed(self, data: bytes) -> list[list[bytes]]:
        """The messages `data` completes, each as its list of frames."""
        if not self.keep:
            raise ValueError("a scanning stream reads with scan()")
        messages: list[list[bytes]] = []
        self._walk(data, messages)
        return messages

    def _frames_start(self, data: bytes) -> int | None:
        """Where frame headers resume in `data`, past the greeting and the rest of a
        frame passed over; None if `data` ends before that (or the stream is unreadable)."""
        if self.unreadable is not None:
            return None
        offset = 0
        if len(self._greeting) < GREETING:
            offset = GREETING - len(self._greeting)
            self._greeting += data[:offset]
            if len(self._greeting) < GREETING:
                return None
            self.unreadable = greeting_problem(bytes(self._greeting))
            if self.unreadable is not None:
                return None
        if self._skip:
            passed = min(self._skip, len(data) - offset)
            self._skip -= passed
            offset += passed
            if self._skip:
                return None
        return offset

    def _walk(
        self,
        data: bytes,
        messages: list[list[bytes]] | None,
        firsts: list[bytes | None] | None = None,
        offsets: list[int] | None = None,
    ) -> tuple[int, int | None, int]:
        offset = self._frames_start(data)
        if offset is None:
            return 0, None, 0
        buffer = self._buffer
        buffer += memoryview(data)[offset:]
        end = len(buffer)
        starts, first, before = 0, None, 0
        position = 0
        in_message = self.in_message
        keep = self.keep
        while end - position >= 2:
            flags = buffer[position]
            if flags & LONG:
                if end - position < 9:
                    break
                head, size = 9, int.from_bytes(buffer[position + 1 : position + 9], "big")
            else:
                head, size = 2, buffer[position + 1]
            if not in_message and first is None:
                first, before = position + offset, starts
            whole = position + head + size <= end
            if not whole and (keep or not (in_message or flags & (COMMAND | LONG))):
                break  # the rest of this frame is still to come
            if flags & COMMAND:
                self.commanded = True
            else:
                if not in_message:
                    starts += 1
                    if firsts is not None:
                        firsts.append(bytes(buffer[position + head : position + head + size]) if whole else None)
                    if offsets is not None:
                        offsets.append(position + offset)
                in_message = bool(flags & MORE)
                if keep:
                    self._frames.append(bytes(buffer[position + head : position + head + size]))
                    if not in_message:
                        assert messages is not None
                        messages.append(self._frames)
                        self._frames = []
            position += head + size
        self.in_message = self.under_way = in_message
        if position > end:
            self._skip = position - end
            self.under_way = in_message or not flags & COMMAND
            buffer.clear()
        else:
            del buffer[:position]
        return starts, first, (before if first is not None else starts)


def second_frame(data: bytes | bytearray, start: int) -> bytes | None:
    """The second frame of the message whose first header is at `start` (a run's
    `delta` or `reply`), if `data` holds it whole."""
    position = start
    for _ in range(2):
        if position + 2 > len(data):
            return None
        flags = data[position]
        if flags & LONG:
            if position + 9 > len(data):
                return None
            head, size = 9, int.from_bytes(data[position + 1 : position + 9], "big")
        else:
            head, size = 2, data[position + 1]
        if position == start and not flags & MORE:
            return None  # a one-frame message
        if position > start:
            end = position + head + size
            return bytes(data[position + head : end]) if end <= len(data) else None
        position += head + size
    return None


def greeting_problem(greeting: bytes) -> str | None:
    """Why a connection's greeting is not one we can read, else None."""
    if greeting[0] != 0xFF or greeting[9] != 0x7F or greeting[10] < 3:
        return "not a ZMTP 3 connection"
    mechanism = greeting[12:32].rstrip(b"\0")
    if mechanism != b"NULL":
        return f"the connection uses the {mechanism.decode(errors='replace')} mechanism (encrypted)"
    return None


def encode_message(frames: list[bytes]) -> bytes:
    """A message's frames as ZMTP 3 puts them on the wire."""
    out = bytearray()
    for i, body in enumerate(frames):
        more = MORE if i < len(frames) - 1 else 0
        if len(body) > 255:
            out += bytes([more | LONG]) + len(body).to_bytes(8, "big")
        else:
            out += bytes([more, len(body)])
        out += body
    return bytes(out)
