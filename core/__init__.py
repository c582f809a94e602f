"""Everything in tracewatch that is not drawing: wire, assembly, client, store,
supervision, config, recording and the demo server. Never imports textual."""
