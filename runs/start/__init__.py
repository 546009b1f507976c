"""How a run is started.

Run profiles (their services and selectors, and their HTTP API), scenario files (driving a run
from a file) and the per-subject limits checked before a run is created. What belongs here: what
decides which runs may start and with what; the run's own writes stay in ``runs.services``.
"""
