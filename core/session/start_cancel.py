"""When a variant may be started or cancelled, and what a cancel does: the first one
begins the stop, a second while it is under way hurries it (a kill at once). One copy
for every variant that stops something it runs, the tests' stand-in included, so the
card's buttons and the keys mean the same whatever the kind."""

from __future__ import annotations

from tracewatch.core.session.contracts import VariantState


class StartAndCancel:
    state: VariantState

    @property
    def can_start(self) -> bool:
        return self.state.can_start

    @property
    def can_cancel(self) -> bool:
        return self.state.can_cancel

    def cancel(self) -> None:
        if self.state is VariantState.CANCELLING:
            self._cancel_again()
        elif self.can_cancel:
            self._begin_cancel()

    def _begin_cancel(self) -> None:
        """Enter CANCELLING and set the stop going."""
        raise NotImplementedError

    def _cancel_again(self) -> None:
        """A cancel while the stop is under way."""
        raise NotImplementedError
