"""What every tap's stop must leave: the deltas it read applied in order, the rest
counted, none both."""

from __future__ import annotations

from collections.abc import Callable

from tracewatch.core.session.rollout import Rollout


def assert_read_in_order_or_counted(rollout: Rollout, sent: int, unread: int, reason: str | None, left: Callable[[int], str]) -> None:
    """A tap's run of an opening delta then `sent` deltas setting `i`, after a stop
    that may have left some unread: those read were applied in order, those left were
    counted, none is both, and the tap's reason says `left(unread)` if and only if
    something was left."""
    read = rollout.deltas - 1  # the opening delta came first
    assert read + unread <= sent
    assert rollout.assembly.traces["t"]["i"] == read - 1  # the last one read, in order
    if unread:
        assert reason == left(unread)
    else:
        assert reason is None
