"""An index of a recording: where each rollout's records are, built in one pass so a
recording far larger than memory opens at once and loads a rollout on demand."""

from __future__ import annotations

import os
from array import array
from pathlib import Path
from typing import Any

import msgpack

from core.recordings.reader import Scan, read_header
from core.session.store import episode_reward
from core.wire.protocol import ABORTED_ERROR, UNPACK_OPTIONS


class RolloutSummary:
    """What the index keeps of one rollout: its announcement, counts, outcome, and
    where its records are (not the records)."""

    __slots__ = (
        "id",
        "announce",
        "request_ids",
        "deltas",
        "first_t",
        "last_t",
        "reply",
        "_rewards",
        "_offsets",
        "_lengths",
    )

    def __init__(self, id: str) -> None:
        self.id = id
        self.announce: dict | None = None
        self.request_ids: list[str] = []
        self.deltas = 0
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.reply: dict | None = None
        """The reply's outcome: `success`, `error`, and `ok` from its head."""
        self._rewards: dict[str, Any] = {}  # trace id -> its latest `rewards`
        self._offsets = array("q")
        self._lengths = array("L")

    @property
    def records(self) -> int:
        return len(self._offsets)

    @property
    def status(self) -> str:
        """running (no reply recorded), ok, error (the episode did not succeed),
        cancelled, or failed (the run has no episode)."""
        if self.reply is None:
            return "running"
        if not self.reply["success"]:
            aborted = str(self.reply["error"]).startswith(ABORTED_ERROR.split(":")[0])
            return "cancelled" if aborted else "failed"
        return "ok" if self.reply["ok"] else "error"

    @property
    def reward(self) -> float | None:
        """As the store computes it for a loaded rollout (`episode_reward`)."""
        return episode_reward(self._rewards.values())

    def _add(self, offset: int, length: int, record: dict) -> None:
        self._offsets.append(offset)
        self._lengths.append(length)
        t = record.get("t")
        if isinstance(t, (int, float)):
            self.first_t = t if self.first_t is None else self.first_t
            self.last_t = t
        kind = record.get("k")
        if kind == "rollout":
            self.announce = record
        elif kind == "request":
            self.request_ids.append(record.get("request_id"))
        elif kind == "delta":
            self.deltas += 1
            delta = record.get("d") or {}
            scalars = delta.get("set")
            if isinstance(scalars, dict) and "rewards" in scalars:
                self._rewards[delta.get("trace")] = scalars["rewards"]
        elif kind == "reply":
            reply = record.get("r") or {}
            head = reply.get("head")
            self.reply = {
                "success": bool(reply.get("success")),
                "error": reply.get("error"),
                "ok": bool(head.get("ok")) if isinstance(head, dict) else False,
            }


def _read_for_index(unpacker: msgpack.Unpacker) -> dict:
    """A record with only what the index keeps decoded: a delta's `trace` and `set`;
    its node and call lists, the bulk of a recording, are skipped undecoded."""
    record = {}
    for _ in range(unpacker.read_map_header()):
        key = unpacker.unpack()
        if key != "d":
            record[key] = unpacker.unpack()
            continue
        delta = record[key] = {}
        for _ in range(unpacker.read_map_header()):
            field = unpacker.unpack()
            if field in ("trace", "set"):
                delta[field] = unpacker.unpack()
            else:
                unpacker.skip()
    return record


class RecordingIndex:
    """Where each rollout's records are in a recording, built in one pass so that a
    recording far larger than memory opens at once and loads a rollout on demand.
    Per record it keeps an offset and a length (12 bytes)."""

    def __init__(self, path: Path, header: dict) -> None:
        self.path = path
        self.header = header
        self.rollouts: dict[str, RolloutSummary] = {}
        """By rollout id, in the order they were announced."""
        self.events: list[dict] = []
        self.records = 0
        self.truncated: str | None = None

    @classmethod
    def build(cls, path: str | os.PathLike[str]) -> RecordingIndex:
        path = Path(path)
        header, start, note = read_header(path)
        index = cls(path, header)
        index.truncated = note
        if note is not None:
            return index
        scan = Scan(path, start, _read_for_index)
        for offset, length, record in scan:
            rollout_id = record.get("id")
            if rollout_id is not None:
                summary = index.rollouts.get(rollout_id)
                if summary is None:
                    summary = index.rollouts[rollout_id] = RolloutSummary(rollout_id)
                summary._add(offset, length, record)
            elif record.get("k") == "event":
                index.events.append(record)
        index.records = scan.count
        index.truncated = scan.note
        return index

    def load(self, rollout_id: str) -> list[dict]:
        """That rollout's records in order, read from the file now."""
        summary = self.rollouts[rollout_id]
        with open(self.path, "rb") as file:
            fd = file.fileno()
            return [
                msgpack.unpackb(os.pread(fd, length, offset), **UNPACK_OPTIONS)
                for offset, length in zip(summary._offsets, summary._lengths)
            ]
