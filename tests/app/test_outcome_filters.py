"""Filtering on outcomes: comparisons on the numeric columns and `error:` texts, checked
against the plain definition over a run with rewards, tokens, errors and elapsed times
of every kind, and in the app: the rows it leaves, and what a malformed comparison says."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.support.filter_reference import reference_matches
from tests.support.polling import until
from tests.support.timed_runs import NOW, timed_engine
from tracewatch.core.session.rollout_filter import Comparison, RowFilter, parse_number
from tracewatch.tui.app import TracewatchApp

STORE = timed_engine(count=30, slots=5).store
for _number, _rollout in enumerate(STORE.rollouts.values()):
    _rollout.step = None if _number % 4 == 0 else _number % 5  # as a training run's files give them; some rollouts have none
FIELDS = ("reward:", "tokens:", "turns:", "errors:", "elapsed:", "step:", "error:", "status:")
VALUES = ("<", "<=", ">", ">=", "=", "0", "0.5", "1", "1200", "3", "1m", "10s", "purpose", "cancel", "sandbox", "toolerror", ",", "x", "f")


def test_comparisons_read_numbers_durations_and_alternatives():
    parsed = RowFilter.parse("reward:<1 reward:>=0.5 errors:>0 turns:>10 tokens:>5000 elapsed:>1m30s elapsed:<=90 error:Sandbox")
    assert parsed.comparisons == (
        Comparison("reward", (("<", 1.0),)), Comparison("reward", ((">=", 0.5),)), Comparison("errors", ((">", 0.0),)),
        Comparison("turns", ((">", 10.0),)), Comparison("tokens", ((">", 5000.0),)),
        Comparison("elapsed", ((">", 90.0),)), Comparison("elapsed", (("<=", 90.0),)),
    )
    assert parsed.errors == ("sandbox",) and not parsed.malformed
    assert RowFilter.parse("reward:<0.2,>0.8").comparisons == (Comparison("reward", (("<", 0.2), (">", 0.8))),)
    assert [parse_number("elapsed", t) for t in ("90", "1m30s", "1:30", "2h", "1.5m", "", "1x", "m")] == [90, 90, 90, 7200, 90, None, None, None]
    assert parse_number("reward", "nan") is None
    assert RowFilter.parse("reward:") == RowFilter(), "a field still being typed filters nothing"
    assert RowFilter.parse("step:3 step:>=2,<1").comparisons == (
        Comparison("step", (("=", 3.0),)), Comparison("step", ((">=", 2.0), ("<", 1.0))),
    )


def test_a_malformed_comparison_says_what_is_expected_and_filters_nothing():
    (problem,) = RowFilter.parse("reward:<abc").problems(["v"])
    assert problem.startswith("reward:<abc is not a comparison: reward: takes <, <=, >, >= or = then a number")
    (problem,) = RowFilter.parse("elapsed:>1x").problems(["v"])
    assert "seconds, or a time such as 1m30s" in problem
    assert not RowFilter.parse("tokens:lots")


@given(st.lists(st.tuples(st.sampled_from(FIELDS), st.lists(st.sampled_from(VALUES), max_size=3).map("".join)), max_size=3))
def test_the_compiled_filter_agrees_with_the_plain_definition(tokens):
    row_filter = RowFilter.parse(" ".join(name + value for name, value in tokens))
    compiled = row_filter.matcher(NOW, STORE.is_stalled)
    for rollout in STORE.rollouts.values():
        assert compiled(rollout) == reference_matches(row_filter, rollout, NOW, STORE.is_stalled), rollout.key


TYPED = st.lists(
    st.sampled_from((*FIELDS, *VALUES, "elapsed:", "²", "③", "١", ":", "1:30", "e9", "inf", "nan", "9" * 400, " "))
    | st.text(max_size=4),
    max_size=8,
).map("".join)
"""Any text, and text that reaches every branch of the parser: fields, operators,
numbers, durations, clocks, digits of other scripts and digit-like characters (`²`)."""


@given(st.text() | TYPED)
def test_any_text_is_a_filter_or_a_hint_never_an_exception(text):
    row_filter = RowFilter.parse(text)
    assert all(isinstance(problem, str) for problem in row_filter.problems(["v"]))
    compiled = row_filter.matcher(NOW, STORE.is_stalled)
    for rollout in STORE.rollouts.values():
        assert compiled(rollout) == reference_matches(row_filter, rollout, NOW, STORE.is_stalled), rollout.key


def test_a_digit_float_cannot_read_is_a_malformed_comparison():
    for text in ("elapsed:²:1", "elapsed:1:②", "elapsed:³"):
        (problem,) = RowFilter.parse(text).problems(["v"])
        assert problem.startswith(f"{text} is not a comparison")
    assert parse_number("elapsed", "١:٣٠") == 90  # float reads any script's decimal digits


async def test_typed_in_the_app_the_rows_are_those_that_compare_and_a_typo_is_explained():
    engine = timed_engine()
    app = TracewatchApp(engine)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.table.row_count == 24)
        await pilot.press("slash", *"reward:<0.5")
        expected = {k for k, r in engine.store.rollouts.items() if r.reward is not None and r.reward < 0.5}
        assert expected and len(expected) < 24
        await until(pilot, lambda: set(app.table.ordered_keys) == expected)
        await pilot.press(*" errors:>0")
        await until(pilot, lambda: app.table.row_count == 0)
        await pilot.press("ctrl+u", *"reward:<abc")
        hint = app.query_one("#filter-hint")
        await until(pilot, lambda: "reward:<abc is not a comparison" in str(hint.render()))
        assert app.table.row_count == 24, "a comparison it cannot read filters nothing"
        await pilot.press("ctrl+u", *"elapsed:²:1")  # `²` is a digit to str.isdigit, not to float
        await until(pilot, lambda: "elapsed:²:1 is not a comparison" in str(hint.render()))
        assert app.is_running and app.table.row_count == 24
        await pilot.press("ctrl+u", *"error:purpose")
        await until(pilot, lambda: set(app.table.ordered_keys) == {k for k, r in engine.store.rollouts.items() if r.reason})
        await pilot.press("ctrl+u", *"error:sandbox")
        sandboxed = {k for k, r in engine.store.rollouts.items() if any(t.errors for t in r.traces.values())}
        assert sandboxed, "the run has rollouts whose traces hold the sandbox's error"
        await until(pilot, lambda: set(app.table.ordered_keys) == sandboxed)
