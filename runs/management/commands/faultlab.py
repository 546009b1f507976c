"""python manage.py faultlab [--json] [--only NAME …] — the seed's fault experiments, for real."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.fault_lab.fault_switch import FaultsDisabled, require_faults_enabled
from runs.fault_lab.faultlab import EXPERIMENTS, run_all
from runs.fault_lab.faultlab_calls import EXPERIMENTS as CALL_EXPERIMENTS


class Command(BaseCommand):
    help = "Run the fault-injection experiments on the database and a real worker; report them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--only",
            nargs="+",
            choices=[e.name for e in EXPERIMENTS] + list(CALL_EXPERIMENTS),
            help="run only these",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            # A deployment that serves users runs with fault injection off: no fault lab there.
            require_faults_enabled()
        except FaultsDisabled as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        try:
            report = run_all(names=options["only"])
        except RuntimeError as exc:
            raise CommandError(f"FAULTLAB_WORKER_FAILED: {exc}") from None
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, default=str))
        else:
            for r in report["experiments"]:
                e = r["evidence"]
                mark = "PASS" if r["passed"] else "FAIL"
                self.stdout.write(
                    f"{mark}  {r['name']:<38} {e['status']:<10} {e['stop_reason'] or '':<44} "
                    f"ledger={[x['status'] for x in e['ledger']]} handoff={e['handoff_id']}"
                )
                for miss in e["failed_expectations"]:
                    self.stdout.write(f"      expected: {miss}")
            self.stdout.write(f"{report['passed']} passed, {report['failed']} failed")
        if report["failed"]:
            raise SystemExit(1)
