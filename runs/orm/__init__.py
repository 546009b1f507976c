"""The ORM adapter of the run store (the ``RunStore`` port of ``runs.domain.ports``).

The store (a step's reads in one round trip, each commit in another), the writers of a commit (one
per part, in one fixed order), rows to domain values and back, what a step reads besides the run
row, and a run's provenance index as a worker keeps it. What belongs here: code that turns a step's
reads and commits into SQL. Services (``runs.services``) and pages call it; it calls no service.
"""
