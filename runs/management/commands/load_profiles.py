"""python manage.py load_profiles FILE [FILE …] --by USERNAME — run profiles from JSON files.

Each file holds one profile or a list of them, in the shape the profiles API takes (the
console's "JSON" editor shows it; docs/first-hour/profile.json is one). Profiles are created
when their name is free and kept as they are when it is taken (an operator's later edits
survive), all in one transaction: one refused profile writes none. ``--by`` names the operator
or admin whose grants the profiles give their runs. Errors name a stable code first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentconsole import wiring
from policy.domain import strict_json
from policy.domain.errors import DomainError
from runs.start.profiles import profiles_load


def _profiles_in(path: Path) -> list[Any]:
    try:
        value = strict_json.loads(path.read_bytes())
    except OSError as exc:
        raise CommandError(f"PROFILE_FILE_NOT_FOUND: {path}: {exc.strerror}") from None
    except DomainError as exc:
        raise CommandError(f"{exc.code}: {path}: {exc.message}") from None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(item, dict) for item in items):
        raise CommandError(f"PROFILE_FILE_INVALID: {path}: a JSON object or a list of objects")
    return items


class Command(BaseCommand):
    help = "Create run profiles from JSON files (kept when one of that name exists)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+")
        parser.add_argument(
            "--by", required=True, help="the operator or admin who defines them (their grants)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        data = [item for raw in options["files"] for item in _profiles_in(Path(raw))]
        by = get_user_model().objects.filter(username=options["by"]).first()
        if by is None:
            raise CommandError(f"USER_NOT_FOUND: no account named {options['by']!r}")
        try:
            created, kept = profiles_load(data=data, by=by, ctx=wiring.context())
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        for name in created:
            self.stdout.write(f"created profile {name}")
        for name in kept:
            self.stdout.write(f"kept profile {name} (one of that name exists)")
