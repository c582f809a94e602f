"""The selected rollout's trace: the pane, the transcript widget and its lines."""
