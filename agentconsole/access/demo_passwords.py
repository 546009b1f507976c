"""The demo accounts' passwords in production (issue 9 item 7, issue 21 item 12): the one
start-up refusal every entry point calls, and the check ``manage.py check --deploy`` reports
(agentconsole/checks.py). No import of the composition root: the Celery app imports this."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections

from runs.demo.demo_users import DEMO_USERS

log = logging.getLogger(__name__)

# The accounts ``load_demo`` creates, each with its user name as password (runs/demo/demo_users.py).
DEMO_PASSWORDS = {name: name for name, _role, _what in DEMO_USERS}


class DemoPasswordsRefused(ImproperlyConfigured):
    """A process with DEBUG=0 refuses to start: a demo password works, or could not be checked."""


def refuse_demo_passwords(entry_point: str) -> None:
    """issue 21 item 12: with DEBUG=0, no entry point runs while an active account still has its
    public demo password (admin/admin...). Called by the ASGI and WSGI applications when they
    are loaded (so daphne, uvicorn, gunicorn... refuse, not only scripts/run.sh) and by the
    Celery worker and beat at start-up (agentconsole/ops/celery_signals.py).

    1. DEBUG on: nothing to check (demo accounts are for development).
    2. One password hash check per active demo account (``demo_accounts_with_demo_password``).
    3. A database it cannot read refuses too: a process started unchecked would serve the demo
       passwords once the database is back (migrate before starting, as documented).
    4. The check leaves no connection behind: a worker's main process forks its pool next, and
       a forked child must not share its parent's sockets.
    """
    if settings.DEBUG:
        return
    try:
        found = demo_accounts_with_demo_password()
    except DatabaseError as exc:
        problem = (
            f"could not check the demo accounts' passwords ({exc.__class__.__name__}): "
            "is the database reachable and migrated (manage.py migrate)?"
        )
    else:
        if not found:
            return
        problem = (
            f"active accounts with their public demo password: {', '.join(found)}. Change "
            "their passwords (manage.py changepassword NAME) or deactivate them"
        )
    finally:
        _close_connections()
    message = f"{entry_point} refuses to start with DEBUG=0: {problem} (agentconsole.E001)"
    log.critical(message)
    raise DemoPasswordsRefused(message)


def _close_connections() -> None:
    for conn in connections.all(initialized_only=True):
        conn.close()
        close_pool = getattr(conn, "close_pool", None)  # PostgreSQL with a pool only
        if close_pool is not None and conn.settings_dict.get("OPTIONS", {}).get("pool"):
            close_pool()


def demo_accounts_with_demo_password() -> list[str]:
    """Active users whose password is still the demo one (a password hash check per account)."""
    users = get_user_model().objects.filter(username__in=DEMO_PASSWORDS, is_active=True)
    return sorted(u.get_username() for u in users if u.check_password(DEMO_PASSWORDS[u.username]))
