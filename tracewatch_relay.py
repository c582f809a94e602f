"""Relay the rollouts your own program drives to any number of tracewatch viewers:

    from tracewatch_relay import Relay, RelayedClient

The relay lives in `tracewatch_guest.relay` (its documentation is there); this is the
name users import it by.
"""

from tracewatch_guest.relay import MAX_BYTES, Relay, RelayedClient, RunRelay

__all__ = ["MAX_BYTES", "Relay", "RelayedClient", "RunRelay"]
