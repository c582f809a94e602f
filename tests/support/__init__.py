"""Helpers the tests and the benchmarks share: deadline polls, real servers the tests play,
the stand-in engine, and the programs the supervision tests start by path."""
