"""agentconsole project package: the composition root on top of the apps, and below them the
kernel they share (agentconsole/kernel/).

It imports nothing itself: every import of the kernel runs this file first, and the kernel must
not pull the root (the Celery app and, through its worker hooks, the apps) in with it. The Celery
app is loaded with Django instead (apps.py), so the apps' shared tasks find it; the worker and
beat find it as ``agentconsole.celery`` (``celery -A agentconsole``).
"""
