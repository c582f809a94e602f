"""The rollouts table's live filter: `variant:baseline status:running,failed phase:agent foo`.

Field values match as substrings and a field's comma-separated values are alternatives;
bare words must all appear in the variant, task, key or a trace id. `status:stalled`
picks rollouts with no delta for longer than the store's stall threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from core.session.store import ROLLOUT_PHASES, Rollout, Status
from tui.columns import COLUMNS

FIELDS = (*(column.key for column in COLUMNS if column.filtered), "status")
"""The `name:VALUE` fields: the columns marked `filtered`, and a rollout's status
(which the Phase column shows only in part)."""
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

    @property
    def asks_stalled(self) -> bool:
        """A status value is a prefix of `stalled` (which time alone can turn true)."""
        return any("stalled".startswith(value) for value in self.statuses)

    def narrows(self, wider: RowFilter) -> bool:
        """Every rollout this filter lets through, `wider` lets through too, now and at
        any earlier moment: then the rows `wider` shows can be refined rather than the
        store scanned again. Each field keeps `wider`'s constraint or tightens it (a value
        that contains one of `wider`'s), every bare word of `wider` is inside one of
        ours, and `wider` never asks for `stalled`, the one test time alone can turn true."""
        if wider.asks_stalled:
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
        return self.matcher(now, stall_seconds)(rollout)

    def matcher(self, now: float, stall_seconds: float) -> Callable[[Rollout], bool]:
        """This filter as one test per rollout, its values weighed once: the statuses
        it lets through as a set, each variant's and phase's verdict as first met, the
        words looked for in the rollout's kept `search_text`, then in its trace ids (a
        word has no space, so it is inside the joined text only if inside one part).
        A pass over 5,000 rollouts then costs a few lookups a row, not a substring
        search per value and a joined, lowered text per row."""
        variants, phases, words = self.variants, self.phases, self.words
        statuses = frozenset(status for status in Status if _any_in(self.statuses, status.value))
        stalled = self.asks_stalled
        by_variant: dict[str, bool] = {}
        by_phase: dict[str, bool] = {}

        def matches(rollout: Rollout) -> bool:
            if variants:
                ok = by_variant.get(rollout.variant)
                if ok is None:
                    ok = by_variant[rollout.variant] = _any_in(variants, rollout.variant.lower())
                if not ok:
                    return False
            if self.statuses and rollout.status not in statuses and not (stalled and rollout.stalled(now, stall_seconds)):
                return False
            if phases:
                phase = rollout.phase
                ok = by_phase.get(phase)
                if ok is None:
                    ok = by_phase[phase] = _any_in(phases, phase)
                if not ok:
                    return False
            if words:
                text, ids = rollout.search_text, None
                for word in words:
                    if word not in text:
                        if ids is None:
                            ids = " ".join(rollout.trace_ids).lower()
                        if word not in ids:
                            return False
            return True

        return matches

    def same_rows(self, other: RowFilter, variants: Iterable[str]) -> bool:
        """This filter and `other` let the same rollouts through, now and later: the
        rows `other` shows need no look at all (`status:r` to `status:running` when no
        other status has an r; `variant:s` when `scale` is the only variant). Never
        when either asks for `stalled`, which time alone turns true."""
        known = tuple(variants)
        mine = self._meaning(known)
        return mine is not None and mine == other._meaning(known)

    def _meaning(self, variants: tuple[str, ...]) -> tuple[object, ...] | None:
        """What the filter lets through: per field the values it accepts (None: every
        one), and its words less those inside another; None if it asks for `stalled`."""
        if self.asks_stalled:
            return None
        return (
            _accepted(self.variants, variants, str.lower),
            _accepted(self.statuses, tuple(status.value for status in Status), str),
            _accepted(self.phases, ROLLOUT_PHASES, str),
            frozenset(word for word in self.words if not any(word in other and word != other for other in self.words)),
        )


def _accepted(values: tuple[str, ...], domain: tuple[str, ...], fold: Callable[[str], str]) -> frozenset[str] | None:
    if not values:
        return None
    accepted = frozenset(name for name in domain if _any_in(values, fold(name)))
    return None if len(accepted) == len(set(domain)) else accepted


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
