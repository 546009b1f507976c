"""`make soak`: runs on PostgreSQL + Redis survive workers killed with SIGKILL (soak/run.py)."""
