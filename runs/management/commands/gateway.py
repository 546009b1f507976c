"""python manage.py gateway — the process that makes the model calls runs wait on (issue 22).

Run one beside the workers (``scripts/gateway.sh``; ``make run`` starts one); more for
availability, each on its own host name. SIGTERM or SIGINT: stop claiming, let the calls in
flight finish for up to ``--shutdown-s`` seconds, give the rest back to the queue, exit 0.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentconsole import wiring
from runs.calls.gateway import install_stop_signals

log = logging.getLogger("runs.calls.gateway")


class Command(BaseCommand):
    help = "Send the model requests runs wait on, asynchronously, and hand answered runs back."
    # A long-running service, like the worker and daphne: no system checks at start (0.3 s,
    # mostly importing the URL conf); the deployment's are `manage.py check --deploy`.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--shutdown-s",
            type=float,
            default=10.0,
            help="on SIGTERM, how long calls in flight may still finish (default 10)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            gateway = wiring.gateway()
        except ImproperlyConfigured as exc:  # a demo password works with DEBUG=0 (E001)
            raise CommandError(str(exc)) from None
        names = ", ".join(f"{n} (≤{e.max_in_flight})" for n, e in gateway.endpoints.items())
        log.warning("gateway %s serving: %s", gateway.owner, names or "no endpoint configured")

        async def main() -> None:
            stop = asyncio.Event()
            install_stop_signals(stop)
            await gateway.run(stop, shutdown_s=options["shutdown_s"])

        asyncio.run(main())
