"""agentconsole project package: the composition root on top of the apps, and below them the
kernel they share (agentconsole/kernel/).

It imports nothing of the project itself: every import of the kernel runs this file first, and
the kernel must not pull the root (the Celery app and, through its worker hooks, the apps) in with
it. The Celery app is loaded with Django instead (apps.py), so the apps' shared tasks find it; the
worker and beat find it as ``agentconsole.celery`` (``celery -A agentconsole``).

Every process of the project (web, worker, gateway, command) imports this package first, by its
settings, before Django loads the apps: ~1,100 modules whose objects all live as long as the
process. Python's collector ran ~300 times over them at each start, for nothing: 0.13 s of a
0.8 s start. Until the apps are ready it runs only every 100,000 allocations; then the objects of
the start are frozen out of its sight and its thresholds are Python's again (apps.py).
"""

import gc

STARTUP_GC_THRESHOLD = 100_000
DEFAULT_GC_THRESHOLDS = gc.get_threshold()
gc.set_threshold(STARTUP_GC_THRESHOLD, *DEFAULT_GC_THRESHOLDS[1:])
