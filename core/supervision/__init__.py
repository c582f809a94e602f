"""Supervision: a child process that cannot outlive the app, its private captures,
and the outcome record."""
