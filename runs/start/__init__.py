"""How a run is started.

Run profiles (their services and selectors, and their HTTP API), scenario files (driving a run
from a file), the per-subject limits a run is created under, and what a new run is bound to (its
grants, a scenario's confirmations). What belongs here: what decides which runs may start and
with what; the run's own writes stay in ``runs.services``.
"""
