"""The `tracewatch` command: the collector stays off while the program starts
(`tracewatch.core.session.retention.pause_collection` says why), so this module imports nothing
else before it."""

from __future__ import annotations

from tracewatch.core.session.retention import pause_collection


def main(argv: list[str] | None = None) -> int:
    pause_collection()
    from tracewatch.cli import main as run  # after the pause: its imports are most of what startup makes

    return run(argv)
