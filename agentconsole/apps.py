"""The project package as an app: no models; the deployment's system checks, the password
signal (agentconsole/access/auth.py; the sign-in throttle is its authentication backend), the
Celery app and the worker's and beat's signals (agentconsole/ops/celery_signals.py), and the end
of the start's collector settings (agentconsole/__init__.py)."""

import gc

from django.apps import AppConfig

import agentconsole


class AgentconsoleConfig(AppConfig):
    name = "agentconsole"
    verbose_name = "agentconsole"

    def ready(self) -> None:
        # import here: models, the user model and the apps' modules are ready only once Django
        # calls ready(). Importing registers the checks (``@register``; agentconsole/checks.py)
        # and makes the Celery app the current one, so the apps' shared tasks send through it
        # (the package's __init__ no longer imports it: agentconsole/__init__.py).
        from django.contrib.auth import get_user_model
        from django.db.models.signals import pre_save

        from agentconsole import celery, checks, wiring  # noqa: F401
        from agentconsole.access import auth, ws_revoke
        from agentconsole.ops import celery_signals
        from runs import context

        pre_save.connect(
            auth.on_user_saved, sender=get_user_model(), dispatch_uid="agentconsole-password"
        )
        ws_revoke.connect()  # rings a user's open sockets to check again (issue 21 item 6)
        # What a worker and beat do at start and stop: Celery's Django fixup sets Django up
        # before the first of those signals (agentconsole/ops/celery_signals.py).
        celery_signals.connect()
        # The default for callers that pass no context (runs.context): the root's own.
        context.install(wiring.context)
        # The start is over: what it allocated lives as long as the process. Frozen, the
        # collector never walks it again (and a worker's forked pool processes share its pages
        # instead of copying them when a collection would touch them).
        gc.freeze()
        gc.set_threshold(*agentconsole.DEFAULT_GC_THRESHOLDS)
