"""python manage.py verify_trace [RUN_ID ...] [--all] [--require-chained] — check runs' traces
against their hash chains (issue 23 item 5, ``runs.domain.trace_chain``).

One line per run: ``verified`` with its event count and head (keep the heads elsewhere to catch
a trace cut short or rewritten whole), ``not chained`` for a run from before the chain, or
``BROKEN`` with the first broken link: the event's sequence and what happened to it (edited,
missing, reordered). Exits 1 when a run is broken (or, with ``--require-chained``, not
chained), naming the first.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.trace.trace_checks import traces_verify


class Command(BaseCommand):
    help = "Check runs' traces against their hash chains; name the first broken link."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_ids", nargs="*", metavar="RUN_ID")
        parser.add_argument("--all", action="store_true", help="check every run")
        parser.add_argument(
            "--require-chained",
            action="store_true",
            help="count a run from before the chain (not chained) as a failure",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        run_ids, every = options["run_ids"], options["all"]
        if bool(run_ids) == every:
            raise CommandError("name the runs to check, or give --all (not both)")
        failed: list[str] = []
        counts = {"verified": 0, "not-chained": 0, "broken": 0}
        try:
            for run_id, verdict in traces_verify(run_ids=run_ids):
                counts[verdict.status] += 1
                line = f"{run_id}: {verdict.text}"
                if verdict.status == "verified":
                    line += f" head {verdict.head or '-'}"
                if verdict.status == "broken" or (
                    verdict.status == "not-chained" and options["require_chained"]
                ):
                    failed.append(line)
                    line = "BROKEN " + line if verdict.status == "broken" else line
                self.stdout.write(line)
        except LookupError as exc:
            raise CommandError(f"RUN_NOT_FOUND: no run {exc}") from None
        summary = ", ".join(f"{n} {status}" for status, n in counts.items())
        self.stdout.write(summary)
        if failed:
            raise CommandError(f"{len(failed)} run(s) failed; first: {failed[0]}")
