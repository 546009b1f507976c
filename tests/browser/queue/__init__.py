"""Browser tests of the confirmation queue: approving and watching the run go on, triage,
a person's other answers, provenance, four eyes. One of the browser folder's units
(tests/support/session/parallel.py).
"""
