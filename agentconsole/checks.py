"""System checks of a deployment (``manage.py check --deploy``; scripts/run.sh runs it before it
starts the web server and the worker when DEBUG is off, because daphne runs no checks itself).
A demo password also stops every entry point on its own (agentconsole/access/demo_passwords.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError

from agentconsole import wiring
from agentconsole.access.demo_passwords import demo_accounts_with_demo_password
from agentconsole.ops.celery_signals import CONFIGURATION_CHECKS


@register(Tags.security, deploy=True)
def check_no_demo_passwords(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """issue 9 item 7: a production start refuses known demo passwords (admin/admin...)."""
    if settings.DEBUG:
        return []
    try:
        found = demo_accounts_with_demo_password()
    except DatabaseError as exc:  # not migrated yet, or unreachable: say so, decide nothing
        return [
            Warning(
                f"could not check the demo accounts' passwords: {exc.__class__.__name__}",
                id="agentconsole.W001",
            )
        ]
    if not found:
        return []
    return [
        Error(
            f"active accounts with their public demo password: {', '.join(found)}",
            hint="change their passwords (manage.py changepassword NAME) or deactivate them; "
            "demo accounts are for development only (DEBUG=1)",
            id="agentconsole.E001",
        )
    ]


# The tag of the deployment's own configuration checks, which every process depends on: each
# worker runs them at start (agentconsole/ops/celery_signals.py), and none of Django's others.
CONFIGURATION = CONFIGURATION_CHECKS


@register(CONFIGURATION)
def check_tool_policy(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """issue 12 item 3: AGENTCONSOLE_TOOL_POLICY (and the tools it names) must be valid, so a
    typo in a tool name or a policy value stops ``manage.py check`` and the start-up."""
    try:
        wiring.tool_policy()
    except ImproperlyConfigured as exc:
        return [
            Error(
                str(exc),
                hint="see the README section 'Tool policy reference'",
                id="agentconsole.E002",
            )
        ]
    return []
