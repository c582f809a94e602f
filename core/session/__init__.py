"""A session: configs, variants (servers we run or attach to), the rollout store the
screen reads, the engine that ties them, and the headless runner."""
