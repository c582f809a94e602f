"""Recordings: the on-disk format, writing, reading, the index for lazy opening,
replay, export, and finished verifiers run folders."""
