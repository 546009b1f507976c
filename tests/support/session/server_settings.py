"""Settings for the live console the browser tests start as processes (daphne, its Celery
worker, the commands run beside it): production's settings, with the suite's password rule.

The test processes hash with one PBKDF2 iteration (``passwords.py``); the console's own
processes hashed with production's million. Every browser test signs in through the form, and
the demo users were made by ``load_demo`` in such a process, so each sign-in checked a
million-iteration hash: py-spy on the console's daphne during ``tests/browser/pages`` found 42 %
of its samples in ``pbkdf2``. With these settings the console hashes and checks as the test
processes do; nothing else differs (the hasher's name and format are production's).

Only the browser stack takes this module (``DJANGO_SETTINGS_MODULE`` in its environment); the
tests of production's entry points and settings start them with ``agentconsole.settings``.
"""

from __future__ import annotations

from agentconsole.settings import *  # noqa: F403 — production's settings, one changed below
from tests.support.session import passwords

PASSWORD_HASHERS = passwords.HASHERS  # production leaves Django's default (a million iterations)
