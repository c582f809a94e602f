"""The filter (core's, so commands can use it) and the table's columns name the same
things: each `name:VALUE` field and each `name:<NUMBER` measure is a column a user sees."""

from tracewatch.core.session.rollout_filter import FIELDS, MEASURES
from tracewatch.tui.table.columns import BY_KEY


def test_every_filter_field_and_measure_is_a_column() -> None:
    assert {*FIELDS, *MEASURES} - {"status"} <= set(BY_KEY)
