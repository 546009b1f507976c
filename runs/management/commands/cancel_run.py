"""python manage.py cancel_run RUN_ID --by NAME --reason TEXT — the cancel command, from a shell."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentconsole import wiring
from policy.domain.errors import DomainError
from runs import services


class Command(BaseCommand):
    help = "Cancel a run: no new tool starts; the running tool is signalled; who and why recorded."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")
        parser.add_argument("--by", required=True, help="who cancels (recorded in the trace)")
        parser.add_argument("--reason", required=True, help="why (recorded in the trace)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            state = services.run_cancel(
                run_id=options["run_id"],
                by=options["by"],
                reason=options["reason"],
                enqueue=True,
                ctx=wiring.context(),
            )
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        self.stdout.write(f"run {state.run_id}: {state.status.value} ({state.stop_reason})")
