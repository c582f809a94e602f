"""Taps: watching rollouts other programs drive (a wire proxy, an injected eval tap, a relay)."""
