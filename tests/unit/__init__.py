"""One part of core or tui in process, by package."""
