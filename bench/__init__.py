"""Benchmarks (`make bench`): figures measured side by side in one run; never pass/fail tests."""
