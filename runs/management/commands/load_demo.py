"""python manage.py load_demo — demo users, the demo corpus and the demo scenarios.

Idempotent: users and documents are upserted; the demo scenarios run only when no run exists yet
(``--force`` runs them again). Passwords are the user names: a demo, never a deployment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandParser

from runs.corpus import demo_corpus_dir, document_load
from runs.models import Run
from runs.scenarios import parse_scenario, run_scenario

DEMO_USERS = (
    # (username, role, what they may do)
    ("operator", "operator", "approves or declines pending confirmations"),
    ("reviewer", "reviewer", "claims and resolves handoffs"),
    ("alice", "user", "starts runs, owns her runs and preferences"),
    ("admin", "admin", "everything, and the Django admin"),
)

DEMO_SCENARIOS = ("seed-walkthrough.json", "save-preference-confirmed.json", "loop-stopped.json")


def scenarios_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "fixtures" / "scenarios"


class Command(BaseCommand):
    help = "Create demo users, load the demo corpus and run the demo scenarios."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--force", action="store_true", help="run the scenarios again")

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        lines = []
        for username, role, what in DEMO_USERS:
            user, _ = user_model.objects.get_or_create(username=username)
            user.set_password(username)
            user.is_staff = user.is_superuser = role == "admin"
            user.save()
            user.groups.add(Group.objects.get_or_create(name=role)[0])
            lines.append(f"{username}/{username}  ({role}: {what})")
        (Path(settings.BASE_DIR) / "var" / "demo-logins.txt").write_text("\n".join(lines) + "\n")
        for path in sorted(demo_corpus_dir().iterdir()):
            document_load(path=path, corpus="public")
        self.stdout.write(f"demo users: {len(lines)}; corpus loaded from {demo_corpus_dir()}")
        if Run.objects.exists() and not options["force"]:
            self.stdout.write("runs exist already; demo scenarios not run again (use --force)")
            return
        owner = user_model.objects.get(username="alice")
        for name in DEMO_SCENARIOS:
            path = scenarios_dir() / name
            if not path.exists():
                continue
            state = run_scenario(parse_scenario(path.read_bytes()), owner=owner)["state"]
            self.stdout.write(f"scenario {name}: {state['status']} ({state['stop_reason']})")
