"""python manage.py run_fixture FILE [--json] — run a scenario file in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentconsole import wiring
from policy.domain.errors import DomainError
from runs.start.scenarios import MAX_SCENARIO_BYTES, parse_scenario, run_scenario


class Command(BaseCommand):
    help = "Run a scenario file (JSON) through the governed runtime and print the outcome."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="path to a scenario JSON file")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            with path.open("rb") as handle:
                # One byte past the limit is enough to refuse it; never read a huge file whole.
                text = handle.read(MAX_SCENARIO_BYTES + 1)
        except OSError as exc:
            raise CommandError(f"SCENARIO_UNREADABLE: {path}: {exc.strerror}") from None
        try:
            result = run_scenario(parse_scenario(text), ctx=wiring.context())
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        if options["json"]:
            self.stdout.write(json.dumps(result, ensure_ascii=False, default=str, indent=2))
            return
        state = result["state"]
        self.stdout.write(f"run {state['run_id']}: {state['status']} ({state['stop_reason']})")
        self.stdout.write(
            f"steps {state['step']}/{state['max_steps']}, "
            f"tool calls {state['tool_calls']}/{state['max_tool_calls']}"
        )
        for event in result["trace"]:
            code = event["details"].get("code") or event["details"].get("reason") or ""
            self.stdout.write(f"  {event['sequence']:>4} {event['event']:<32} {code}")
        if state["answer"]:
            self.stdout.write(f"answer: {state['answer']} {state['citations']}")
