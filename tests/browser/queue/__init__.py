"""Browser tests of the confirmation queue: approving and watching the run go on, triage,
a person's other answers, provenance, four eyes.
"""
