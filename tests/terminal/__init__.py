"""The `tracewatch` command as a user runs it, in a real terminal (tmux)."""
