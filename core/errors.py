"""The one base of every error core raises to a user: the CLI catches it and prints
its message, so a subclass's message is written for the person who ran tracewatch.

It imports nothing of tracewatch's, so any layer can raise it."""

from __future__ import annotations


class TracewatchError(Exception):
    """A failure the user can act on; `str(error)` is what they read."""
