"""A session's parts: configs, variants (servers we run or attach to), the rollout
store the screen reads, and the shapes (`contracts`) every kind of session fills."""
