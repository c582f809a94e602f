"""The run as a whole: what each rollout's time went to, kept after its traces leave
memory, and time series bucketed as rollouts arrive; what the timeline, the trends and
the trace-events export read, live, replayed or opened alike."""
