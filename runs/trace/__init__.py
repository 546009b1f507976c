"""A run's trace, after the fact.

Checked against its hash chain (trace_checks; ``manage.py verify_trace``), exported as a file
(trace_export) and served for download (trace_apis). What belongs here: reads of a finished or
running trace as a whole; the events are written by the store (``runs.orm``).
"""
