"""Hostile `metrics.jsonl` lines in the real app's Trends tab (run_test): generated rows
whose values are NaN, infinities, floats near the limit, integers past 64 bits,
strings, nulls, lists and maps; whose steps go backwards, are null, huge or not
numbers; whose keys hold control characters; beside garbage lines, and a row of
thousands of keys. Every numeric key is charted (or counted past the charts a screen
holds) or its chart says its values were skipped; the app draws them, filters and
smooths them, and never exits on one."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.polling import until
from tracewatch.core.engine.followed_run import FollowedRun
from tracewatch.core.recordings.prime_rl.layout import StreamRun, detect
from tracewatch.core.recordings.prime_rl.metrics import ROW_KEYS
from tracewatch.tui.app import TracewatchApp
from tracewatch.tui.run_views.metrics_view import MAX_CHARTS

values = st.one_of(
    st.floats(),
    st.floats(min_value=1e300, max_value=1.7e308) | st.floats(min_value=-1.7e308, max_value=-1e300),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.text(max_size=4),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
steps = st.one_of(st.none(), st.integers(-3, 40), st.integers(min_value=2**53, max_value=2**70), st.text(max_size=3), st.floats())
keys = st.one_of(st.sampled_from(["loss/mean", "entropy/mean", "reward"]), st.text(max_size=12))
rows = st.fixed_dictionaries(
    {"step": steps, "time": st.one_of(st.floats(), st.none(), st.text(max_size=2)), "producer": st.one_of(st.none(), st.text(max_size=6), st.integers(), st.lists(st.text(max_size=2), max_size=1))},
).flatmap(lambda head: st.dictionaries(keys, values, min_size=1, max_size=4).map(lambda body: {**body, **head}))
lines = st.lists(st.one_of(rows.map(lambda row: json.dumps(row).encode()), st.binary(max_size=20).map(lambda b: b.replace(b"\n", b" "))), min_size=1, max_size=12)

MANY_KEYS = [json.dumps({"step": 1, "time": 1.0, "producer": "trainer", **{f"k{n}": n for n in range(3000)}}).encode()]
BACKWARDS = [json.dumps({"step": step, "time": float(step), "producer": "trainer", "loss": step / 10}).encode() for step in (1, 2, 3, 2, 1, 5)]


def numeric_keys(written: list[bytes]) -> set[str]:
    """The keys a row gives a number (what the reader keeps)."""
    found: set[str] = set()
    for line in written:
        try:
            row: Any = json.loads(line)
        except ValueError:
            continue
        if type(row) is dict:
            found |= {key for key, value in row.items() if key not in ROW_KEYS and type(value) in (int, float)}
    return found


async def chart(folder: Path, written: list[bytes]) -> None:
    layout = detect(folder)
    assert isinstance(layout, StreamRun)
    session = FollowedRun(layout, follow=False).snapshot()
    app = TracewatchApp(session)
    expected = numeric_keys(written)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("6")
        view = app.metrics
        assert view is not None
        await until(pilot, lambda: app.focused is view, lambda: f"the charts focused on 6; focus is on {app.focused}")
        for _ in range(2):
            charted = {chart.key for chart in view.charts}
            if len(expected) <= MAX_CHARTS:
                assert charted == expected
            else:
                assert charted <= expected and len(charted) + view.left_out == len(expected)
            for item in view.charts:
                if len(item.x):
                    assert all(abs(v) <= 1.8e308 for v in (item.low, item.high, item.last))
            text = view.render().plain
            assert not any(ord(c) < 32 and c != "\n" for c in text), "no control character reaches the screen"
            await pilot.press("m")
            await pilot.pause()
        await pilot.press("slash", "k", "1")
        await pilot.pause()
        await pilot.press("escape", "escape")
        await pilot.pause()
        assert app.is_running
    await session.shutdown()
    assert app.return_code in (0, None)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(written=lines)
@example(written=MANY_KEYS)
@example(written=BACKWARDS)
def test_hostile_metrics_are_charted_or_skipped_with_a_word_never_raised(written: list[bytes]) -> None:
    with tempfile.TemporaryDirectory(prefix="tracewatch-metrics-") as folder:
        monitor = Path(folder) / "out" / "monitors" / "file"
        monitor.mkdir(parents=True)
        (monitor / "metrics.jsonl").write_bytes(b"\n".join(written) + b"\n")
        (monitor / "plan.json").write_bytes(b'{"math": {"3": 4, "x": 1, "-2": "n"}, "7": []}')
        asyncio.run(chart(Path(folder) / "out", written))
