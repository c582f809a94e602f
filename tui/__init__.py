"""The screen: the Textual app and its rooms. Talks to `tracewatch.core` only; never
imports zmq, subprocess or signal."""
