"""The test session's own machinery, not helpers of any one test: how ``make test``'s parallel
processes get a database and a Redis database each (parallel.py), and how a transactional
test's tables are emptied after it (flush.py). tests/conftest.py wires both in."""
