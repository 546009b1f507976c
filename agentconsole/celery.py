"""The Celery application; configuration comes from Django settings prefixed ``CELERY_``.

The apps import it (the fault lab sends with it), so it imports nothing above the kernel: what a
worker and beat do at start and stop is connected with Django (agentconsole/ops/celery_signals.py,
from AgentconsoleConfig.ready()), which both set up before their first signal.
"""

import os

from celery import Celery

from agentconsole.kernel import broker

# "agentfs://": the embedded broker whose messages appear atomically
# (agentconsole/kernel/broker.py).
broker.register()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentconsole.settings")

app = Celery("agentconsole")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
