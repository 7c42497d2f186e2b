"""Benchmarks (not part of the test suite). See docs/benchmarks.md."""
