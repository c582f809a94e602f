"""The rollouts table's live filter: `variant:baseline status:running,failed phase:agent foo`.

Field values match as substrings and a field's comma-separated values are alternatives;
bare words must all appear in the variant, task, key or a trace id. `status:stalled`
picks rollouts with no delta for longer than the store's stall threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from core.session.store import ROLLOUT_PHASES, Rollout, Status

FIELDS = ("variant", "status", "phase")
STATUSES = (*(status.value for status in Status), "stalled")


@dataclass(frozen=True)
class RowFilter:
    variants: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()
    words: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> RowFilter:
        fields: dict[str, list[str]] = {name: [] for name in FIELDS}
        words: list[str] = []
        for token in text.lower().split():
            name, colon, value = token.partition(":")
            if colon and name in fields:
                fields[name].extend(v for v in value.split(",") if v)
            else:
                words.append(token)
        return cls(
            tuple(fields["variant"]), tuple(fields["status"]), tuple(fields["phase"]), tuple(words)
        )

    def __bool__(self) -> bool:
        return bool(self.variants or self.statuses or self.phases or self.words)

    def narrows(self, wider: RowFilter) -> bool:
        """Every rollout this filter lets through, `wider` lets through too, now and at
        any earlier moment: then the rows `wider` shows can be refined rather than the
        store scanned again. Each field keeps `wider`'s constraint or tightens it (a value
        that contains one of `wider`'s), every bare word of `wider` is inside one of
        ours, and `wider` never asks for `stalled`, the one test time alone can turn true."""
        if any("stalled".startswith(value) for value in wider.statuses):
            return False
        return (
            _tightens(self.variants, wider.variants, _contains)
            and _tightens(self.statuses, wider.statuses, _status_implies)
            and _tightens(self.phases, wider.phases, _contains)
            and all(any(old in new for new in self.words) for old in wider.words)
        )

    def problems(self, variants: Iterable[str]) -> list[str]:
        """A value no rollout can match, with the values there are: `status:bogus`
        shows why the table is empty rather than just an empty table."""
        known = {"variant": tuple(v.lower() for v in variants), "status": STATUSES, "phase": ROLLOUT_PHASES}
        found = []
        for name, values in (("variant", self.variants), ("status", self.statuses), ("phase", self.phases)):
            for value in values:
                if not _any_in((value,), " ".join(known[name])):
                    found.append(f"{name}:{value} matches nothing; {name} is one of {', '.join(known[name]) or '(none yet)'}")
        return found

    def matches(self, rollout: Rollout, now: float, stall_seconds: float) -> bool:
        if self.variants and not _any_in(self.variants, rollout.variant.lower()):
            return False
        if self.statuses:
            status = rollout.status.value
            stalled = rollout.stalled(now, stall_seconds)
            if not any(v in status or (stalled and "stalled".startswith(v)) for v in self.statuses):
                return False
        if self.phases and not _any_in(self.phases, rollout.phase):
            return False
        if self.words:
            haystack = " ".join(
                (rollout.key, rollout.variant, rollout.task_label, *rollout.trace_ids)
            ).lower()
            return all(word in haystack for word in self.words)
        return True


def _tightens(
    values: tuple[str, ...], wider: tuple[str, ...], implies: Callable[[str, str], bool]
) -> bool:
    """A field's alternatives are no wider: no constraint before, or each value now
    implies one of the earlier values."""
    return not wider or bool(values) and all(any(implies(new, old) for old in wider) for new in values)


def _contains(new: str, old: str) -> bool:
    return old in new


def _status_implies(new: str, old: str) -> bool:
    """`new` matches a status as a substring, or `stalled` as a prefix: a value inside
    `new` holds the first, only a prefix of `new` also holds the second."""
    return new.startswith(old) or old in new and not "stalled".startswith(new)


def _any_in(values: tuple[str, ...], text: str) -> bool:
    return any(value in text for value in values)
