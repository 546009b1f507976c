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
# Celery's Django fixup runs Django's system checks at every worker start: 0.3 s of CPU, most of
# it importing the URL conf and its views, which a worker never serves. The deployment's checks
# are `manage.py check --deploy` (docs/deploy.md; scripts/run.sh runs it before it starts
# anything); a worker, like daphne, runs none of its own.
os.environ.setdefault("CELERY_SKIP_CHECKS", "1")

app = Celery("agentconsole")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
