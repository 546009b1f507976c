"""python manage.py load_demo — demo users, the demo corpus and the demo runs.

Development only (issue 9 item 7): it refuses to run with DEBUG off, and there is no flag to
override that; a deployment creates its accounts with ``createsuperuser`` and ``grant_role``
(docs/deploy.md, "The first hour"). Missing demo users are created with their user name as password;
an existing user is never changed (a changed password stays changed). Documents are upserted; the
demo runs (``runs.demo.demo_runs``: one of each state the console shows) are made by the real
runner, each only when it is not there yet.

``--auto`` is what ``make run`` calls: it loads the demo only on a fresh database (no user yet),
or on every start when AGENTCONSOLE_DEMO=1; AGENTCONSOLE_DEMO=0 never loads it; with DEBUG off it
does nothing (and says so) instead of failing the start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentconsole import wiring
from runs.demo.demo_profiles import load_demo_profiles
from runs.demo.demo_runs import load_demo_runs
from runs.demo.demo_users import DEMO_USERS
from runs.tools.corpus import demo_corpus_dir, document_load


class Command(BaseCommand):
    help = "Create demo users, load the demo corpus and make the demo runs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--auto",
            action="store_true",
            help="as `make run`: only on a fresh development database, or when AGENTCONSOLE_DEMO=1",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["auto"]:
            skip = _auto_skip_reason()
            if skip:
                self.stdout.write(f"demo not loaded: {skip}")
                return
        elif not settings.DEBUG:
            raise CommandError(
                "load_demo creates accounts with public passwords (admin/admin): it runs only "
                "on a development setup (DEBUG=1). Create real accounts with createsuperuser "
                "and grant_role (docs/deploy.md, The first hour)."
            )
        lines = _demo_users()
        logins = Path(settings.BASE_DIR) / "var" / "demo-logins.txt"
        logins.parent.mkdir(parents=True, exist_ok=True)
        logins.write_text("\n".join(lines) + "\n")
        for path in sorted(demo_corpus_dir().iterdir()):
            document_load(path=path, corpus="public")
        self.stdout.write(f"demo users: {len(lines)}; corpus loaded from {demo_corpus_dir()}")
        admin = get_user_model().objects.get(username="admin")
        profiles = load_demo_profiles(by=admin, ctx=wiring.context())
        self.stdout.write(
            f"demo run profiles created: {', '.join(profiles) or 'none (they exist)'}"
        )
        for run in load_demo_runs(ctx=wiring.context()):
            made = "made" if run.created else "there already"
            self.stdout.write(
                f"demo run {run.key}: {run.run_id} {run.status} ({run.stop_reason}), {made}"
            )


def _auto_skip_reason() -> str:
    """Why ``--auto`` loads nothing now ("" when it should load the demo)."""
    wanted = settings.AGENTCONSOLE_DEMO
    if not settings.DEBUG:
        return "DEBUG is off (the demo is for development only)"
    if wanted == "0":
        return "AGENTCONSOLE_DEMO=0"
    if wanted != "1" and get_user_model().objects.exists():
        return "the database has users already (AGENTCONSOLE_DEMO=1 loads it anyway)"
    return ""


def _demo_users() -> list[str]:
    """Create the demo users that do not exist; never touch one that does (its password, flags
    and groups are its owner's). Returns the login lines for var/demo-logins.txt: only accounts
    whose password is still the demo one."""
    user_model = get_user_model()
    lines = []
    for username, role, what in DEMO_USERS:
        user, created = user_model.objects.get_or_create(username=username)
        if created:
            user.set_password(username)
            user.is_staff = user.is_superuser = role == "admin"
            user.save()
            user.groups.add(Group.objects.get_or_create(name=role)[0])
        elif not user.check_password(username):
            continue
        lines.append(f"{username}/{username}  ({role}: {what})")
    return lines
