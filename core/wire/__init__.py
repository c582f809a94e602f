"""The wire: verifiers 0.4.0 frames and models, the client that speaks them, and the
assembly that turns deltas into the exact episode."""
