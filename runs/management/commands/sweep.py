"""python manage.py sweep [--inline] — one sweep (the periodic task does the same every 5 s)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agentconsole import wiring
from runs.engine.sweeper import sweep


class Command(BaseCommand):
    help = "Cancel overdue waiting runs and hand stranded runs back to a worker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--inline", action="store_true", help="advance stranded runs here, not via a worker"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = sweep(enqueue=not options["inline"], ctx=wiring.context())
        self.stdout.write(
            f"expired waiting runs: {len(report.expired_waiting)}; "
            f"stranded runs handed back: {len(report.requeued)}"
        )
