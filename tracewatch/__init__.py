"""tracewatch: watch LLM-agent rollouts live, turn by turn.

The one name the package installs under. The repository keeps the code where its
readers look for it, `core/` (everything that is not drawing) and `tui/` (the screen);
`tracewatch/core` and `tracewatch/tui` are links to them, so the source tree, the type
checker and the wheel all see `tracewatch.core` and `tracewatch.tui`, and nothing named
`core` or `tui` lands beside a user's own packages. The modules here are the command
line, the composition root above both.
"""
