"""Benchmarks: each prints ratios against a baseline measured in the same run. Run one from
the repository root as `python -m bench.NAME`."""
