"""The test session's own machinery, not helpers of any one test: how ``make test``'s parallel
processes get a database and a Redis database each, and their scheduler (parallel.py).
tests/conftest.py wires it in."""
