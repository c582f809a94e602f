"""Everything in tracewatch that is not drawing: the wire, sessions, supervision,
recordings and the demo server. Never imports textual or rich."""
