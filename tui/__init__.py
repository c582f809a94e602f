"""The Textual app. Talks to `core` only; never imports zmq or subprocess."""
