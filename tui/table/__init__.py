"""The rollouts table: its columns, its rows drawn from the store, the filter's field."""
