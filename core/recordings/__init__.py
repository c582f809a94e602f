"""Recordings: the on-disk format, writing, reading, the index for lazy opening,
records and episodes applied to a store, export, and finished verifiers run folders."""
