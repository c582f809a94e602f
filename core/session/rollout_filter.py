"""The rollouts filter: `variant:baseline status:running,failed phase:agent foo`. The
table filters by it as the user types; it needs no screen, so any command can too.

Field values match as substrings and a field's comma-separated values are alternatives;
bare words must all appear in the variant, task, key or a trace id. `status:stalled`
picks rollouts with no delta for longer than their variant's stall threshold. The numeric
columns take comparisons (`reward:<1`, `tokens:>=5000`, `elapsed:>1m30s`; no operator
means equal), alternatives again comma-separated; a rollout without the number (no
reward yet) matches none. `error:TEXT` looks in why a rollout failed or was cancelled
and in its errors' types and messages.
`flag:tool-trained` and `flag:misaligned` pick the rollouts whose training tokens are
wrong that way (`tracewatch.core.tokens.flags`). In a prime-rl run, `used:1` picks the
episodes the trainer used and `used:0` those it said it did not.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tracewatch.core.session.phases import ROLLOUT_PHASES
from tracewatch.core.session.rollout import Rollout
from tracewatch.core.session.status import Status
from tracewatch.core.session.store import StallTest
from tracewatch.core.tokens.flags import FLAGS

FIELDS = ("variant", "phase", "flag", "status")
"""The `name:VALUE` fields: the table's Variant, Phase and Flags columns, and a
rollout's status (which the Phase column shows only in part)."""
Measure = Callable[[Rollout, float], float | None]
"""A rollout's number at `now`; None where it has none yet (no reward), which no
comparison lets through."""
MEASURES: dict[str, Measure] = {
    "step": lambda r, now: r.step,
    "turns": lambda r, now: r.turns,
    "tokens": lambda r, now: r.tokens,
    "reward": lambda r, now: r.reward,
    "elapsed": lambda r, now: r.elapsed(now) if r.started_at else None,
    "errors": lambda r, now: r.errors,
    "used": lambda r, now: None if r.used is None else float(r.used),
}
"""The `name:<NUMBER` fields, each named for the table's column that shows the number."""
OPERATORS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt, "==": operator.eq, "=": operator.eq, "": operator.eq}
_COMPARISON = re.compile(r"(<=|>=|==|<|>|=)?(.*)")
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")
_CLOCK = re.compile(r"(\d+):(\d+)")
"""`1:30`, in the digits `float` reads (any script's decimal digits): `str.isdigit`
also takes superscripts and circled digits (`²`, `③`), which `float` refuses."""
TIMED = "elapsed"
"""The measure that moves with the clock alone, as `stalled` does."""


@dataclass(frozen=True)
class Comparison:
    """One numeric field's test: any of its (operator, number) alternatives holds."""

    field: str
    alternatives: tuple[tuple[str, float], ...]

    def holds(self, value: float | None) -> bool:
        return value is not None and any(OPERATORS[op](value, number) for op, number in self.alternatives)


def parse_number(field: str, text: str) -> float | None:
    """A comparison's number: seconds for `elapsed` (`90`, `1m30s`, `2h`, `1:30`), a
    plain number for the others; None if it is not one."""
    if field == TIMED:
        if ":" in text:
            clock = _CLOCK.fullmatch(text)
            return float(clock[1]) * 60 + float(clock[2]) if clock is not None else None
        match = _DURATION.fullmatch(text)
        if text and match is not None and any(match.groups()):
            hours, minutes, seconds = (float(part or 0) for part in match.groups())
            return hours * 3600 + minutes * 60 + seconds
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    return number if number == number else None  # NaN compares with nothing


def parse_comparison(field: str, value: str) -> Comparison | str:
    """`<1,>=0.5` as a Comparison, or what was expected instead."""
    alternatives = []
    for part in (v for v in value.split(",") if v):
        match = _COMPARISON.fullmatch(part)
        assert match is not None  # the pattern matches any text
        op, number_text = match.groups()
        number = parse_number(field, number_text)
        if number is None:
            unit = "seconds, or a time such as 1m30s" if field == TIMED else "a number"
            return f"{field}:{value} is not a comparison: {field}: takes <, <=, >, >= or = then {unit} ({field}:>{'60' if field == TIMED else '1'})"
        alternatives.append((op or "=", number))
    return Comparison(field, tuple(alternatives))
STATUSES = (*(status.value for status in Status), "stalled")


@dataclass(frozen=True)
class RowFilter:
    variants: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()
    words: tuple[str, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    errors: tuple[str, ...] = ()
    malformed: tuple[str, ...] = ()
    """What a comparison that could not be read should have been (it filters nothing)."""
    flags: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> RowFilter:
        fields: dict[str, list[str]] = {name: [] for name in FIELDS}
        words: list[str] = []
        comparisons: list[Comparison] = []
        errors: list[str] = []
        malformed: list[str] = []
        for token in text.lower().split():
            name, colon, value = token.partition(":")
            if colon and name in fields:
                fields[name].extend(v for v in value.split(",") if v)
            elif colon and name in MEASURES:
                parsed = parse_comparison(name, value) if value.strip(",") else None
                if isinstance(parsed, Comparison):
                    comparisons.append(parsed)
                elif parsed is not None:
                    malformed.append(parsed)
            elif colon and name == "error":
                errors.extend(v for v in value.split(",") if v)
            else:
                words.append(token)
        return cls(
            tuple(fields["variant"]), tuple(fields["status"]), tuple(fields["phase"]), tuple(words),
            tuple(comparisons), tuple(errors), tuple(malformed), tuple(fields["flag"]),
        )

    def __bool__(self) -> bool:
        return bool(self.variants or self.statuses or self.phases or self.words or self.comparisons or self.errors or self.flags)

    @property
    def moves_with_time(self) -> bool:
        """Time alone can change what it lets through: it asks for `stalled`, or
        compares the elapsed time."""
        return self.asks_stalled or any(c.field == TIMED for c in self.comparisons)

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
        if wider.moves_with_time:
            return False
        return (
            _tightens(self.variants, wider.variants, _contains)
            and _tightens(self.statuses, wider.statuses, _status_implies)
            and _tightens(self.phases, wider.phases, _contains)
            and _tightens(self.flags, wider.flags, _contains)
            and all(any(old in new for new in self.words) for old in wider.words)
            and set(wider.comparisons) <= set(self.comparisons)
            and all(any(old in new for new in self.errors) for old in wider.errors)
        )

    def problems(self, variants: Iterable[str]) -> list[str]:
        """A value no rollout can match, with the values there are: `status:bogus`
        shows why the table is empty rather than just an empty table."""
        known = {"variant": tuple(v.lower() for v in variants), "status": STATUSES, "phase": ROLLOUT_PHASES, "flag": FLAGS}
        found = []
        fields = (("variant", self.variants), ("status", self.statuses), ("phase", self.phases), ("flag", self.flags))
        for name, values in fields:
            for value in values:
                if not _any_in((value,), " ".join(known[name])):
                    found.append(f"{name}:{value} matches nothing; {name} is one of {', '.join(known[name]) or '(none yet)'}")
        return [*found, *self.malformed]

    def matches(self, rollout: Rollout, now: float, is_stalled: StallTest) -> bool:
        return self.matcher(now, is_stalled)(rollout)

    def matcher(self, now: float, is_stalled: StallTest) -> Callable[[Rollout], bool]:
        """This filter as one test per rollout, its values weighed once: the statuses
        it lets through as a set, each variant's and phase's verdict as first met, the
        words looked for in the rollout's kept `search_text`, then in its kept trace ids
        (a word has no space, so it is inside the joined text only if inside one part).
        A pass over 5,000 rollouts then costs a few lookups a row, not a substring
        search per value and a joined, lowered text per row."""
        variants, phases, words = self.variants, self.phases, self.words
        outcome = self._outcome(now)
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
            if self.statuses and rollout.status not in statuses and not (stalled and is_stalled(rollout, now)):
                return False
            if phases:
                phase = rollout.phase
                ok = by_phase.get(phase)
                if ok is None:
                    ok = by_phase[phase] = _any_in(phases, phase)
                if not ok:
                    return False
            if outcome is not None and not outcome(rollout):
                return False
            if words:
                text = rollout.search_text
                for word in words:
                    if word not in text and word not in rollout.summary().ids_text:
                        return False
            return True

        return matches

    def _outcome(self, now: float) -> Callable[[Rollout], bool] | None:
        """The comparisons, `error:` texts and flags as one test (None: there are none)."""
        comparisons, errors, flags = self.comparisons, self.errors, self.flags
        if not comparisons and not errors and not flags:
            return None

        def holds(rollout: Rollout) -> bool:
            if flags and not any(_any_in(flags, flag) for flag in rollout.flags):
                return False
            if not all(comparison.holds(MEASURES[comparison.field](rollout, now)) for comparison in comparisons):
                return False
            if errors:
                said = rollout.error_text
                return all(text in said for text in errors)
            return True

        return holds

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
        if self.moves_with_time:
            return None
        return (
            _accepted(self.variants, variants, str.lower),
            _accepted(self.statuses, tuple(status.value for status in Status), str),
            _accepted(self.phases, ROLLOUT_PHASES, str),
            # a rollout has no flag or some: accepting every flag still asks for one
            frozenset(flag for flag in FLAGS if _any_in(self.flags, flag)) if self.flags else None,
            frozenset(word for word in self.words if not any(word in other and word != other for other in self.words)),
            frozenset(self.comparisons),
            frozenset(text for text in self.errors if not any(text in other and text != other for other in self.errors)),
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
