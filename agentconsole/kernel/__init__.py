"""The kernel every app stands on: shared infrastructure that imports none of the apps.

What belongs here: plumbing more than one app (or the project root and an app) uses and that
decides nothing about runs, memory, grants or notifications: the HTTP error shape and the strict
JSON parser (http.py), the status of a domain error (status.py), the console pages' helpers
(pages.py), the roles as groups (roles.py), the read-only admin base (admin_base.py), the run a
log line belongs to (log_context.py), plain statements in one round trip (sqlbatch.py), the one
rate limiter (ratelimit.py) and the embedded Celery broker's transport (broker.py).

What does not: anything that imports an app's models, services or selectors, or anything else of
``agentconsole`` (the composition root sits on top of the apps, the kernel below them). From the
apps the kernel reads only ``policy.domain``'s plain-Python errors and JSON forms (errors.py,
strict_json.py, canonical.py), which import nothing internal: tests/architecture/test_imports.py.
"""
