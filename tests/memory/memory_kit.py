"""Helpers shared by the memory-governance acceptance tests (issue 4; SPEC §6; seed §2.2, §2.3, §9).

``run_file`` runs a scenario file through the real command, ``manage.py run_fixture FILE --json``
(in-process, ``call_command``), and wraps the JSON it prints. ``memory_snapshot`` is everything
long-term memory holds, so a test can say "nothing written" as "the snapshot did not change".
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.apps import apps
from django.db import connection, transaction

from agentconsole import wiring
from memory.models import (
    PreferenceChange,
    PreferenceHistory,
    PreferenceRecord,
    WorkingMemoryItem,
)
from memory.services import preference_write
from runs.models import LedgerEntry, Observation, Run
from tests.support.runs import ExportedRun, run_fixture_json, scenario_path

SUBJECT = "alice"


class Result(ExportedRun):
    """The ``--json`` output of one ``run_fixture`` call, with small lookups."""

    def codes(self) -> set[str]:
        """Every code anywhere in the trace details (rejections, confirmation checks, tools)."""
        return {e["details"]["code"] for e in self.trace if e["details"].get("code")}

    def check_invariants(self) -> None:
        assert [e["sequence"] for e in self.trace] == list(range(1, len(self.trace) + 1))
        assert len(self.events("planner.output")) == self.state["step"]
        assert len(self.ledger) == self.state["tool_calls"]
        assert [e["proposal_id"] for e in self.events("tool.started")] == [
            r["proposal_id"] for r in self.ledger
        ]
        assert all(r["status"] != "started" for r in self.ledger), self.ledger_rows()


def run_path(path: Path | str) -> Result:
    result = Result(run_fixture_json(path))
    result.check_invariants()
    return result


def run_file(name: str) -> Result:
    return run_path(scenario_path(name))


def run_data(data: dict[str, Any], directory: Path) -> Result:
    """Run an in-memory scenario (a modified copy of a file) through the same command."""
    path = directory / f"{data.get('name') or 'variant'}.json"
    path.write_text(json.dumps(copy.deepcopy(data), ensure_ascii=False), encoding="utf-8")
    return run_path(path)


def memory_snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every row of long-term memory (records, history, pending edits), timestamps included."""
    return {
        "records": list(PreferenceRecord.objects.order_by("subject", "key").values()),
        "history": list(PreferenceHistory.objects.order_by("id").values()),
        "changes": list(PreferenceChange.objects.order_by("id").values()),
    }


def clear_memory() -> None:
    """Forget every long-term memory row (committed), so the next run starts from none."""
    with transaction.atomic():
        PreferenceChange.objects.all().delete()
        PreferenceHistory.objects.all().delete()
        PreferenceRecord.objects.all().delete()


def delete_committed_rows() -> None:
    """Empty every table a scenario run writes (the runs, policy and memory apps).

    For rows committed outside a test's own transaction (a module's batch of runs). DELETE in one
    transaction (foreign keys are deferred on both backends, so any order): far cheaper than the
    TRUNCATE of a flush on PostgreSQL, and it leaves the migration-created groups alone.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        for app in ("memory", "policy", "runs"):
            for model in apps.get_app_config(app).get_models(include_auto_created=True):
                table = connection.ops.quote_name(model._meta.db_table)
                cursor.execute(f"DELETE FROM {table}")  # noqa: S608 -- a model's own table


@dataclass(frozen=True)
class Ran:
    """One scenario run of a batch, with long-term memory just before and just after it."""

    result: Result
    before: dict[str, list[dict[str, Any]]]
    after: dict[str, list[dict[str, Any]]]
    # Proposal ids of the run's save_preference ledger rows, read from the database.
    saves: tuple[str, ...]

    def history(self) -> list[tuple[Any, ...]]:
        """(key, version, action, value) of the history after the run, in order."""
        return [(h["key"], h["version"], h["action"], h["value"]) for h in self.after["history"]]

    def record(self, key: str, subject: str = SUBJECT) -> dict[str, Any]:
        (found,) = [r for r in self.after["records"] if (r["subject"], r["key"]) == (subject, key)]
        return found


def run_fresh(name: str) -> Ran:
    """Run a file with long-term memory emptied first; capture memory around the run."""
    clear_memory()
    before = memory_snapshot()
    result = run_file(name)
    saves = LedgerEntry.objects.filter(run_id=result.run_id, tool_name="save_preference")
    return Ran(
        result,
        before,
        memory_snapshot(),
        tuple(saves.order_by("id").values_list("proposal_id", flat=True)),
    )


def history_rows(subject: str = SUBJECT, key: str | None = None) -> list[tuple[Any, ...]]:
    """(key, version, action, value) of the subject's history, in order."""
    rows = PreferenceHistory.objects.filter(subject=subject)
    if key is not None:
        rows = rows.filter(key=key)
    return list(rows.order_by("id").values_list("key", "version", "action", "value"))


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """JSON → {dotted path: leaf}; used to prove two scenario files differ in one place only."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out or {prefix.rstrip("."): {}}
    if isinstance(data, list):
        out = {}
        for i, v in enumerate(data):
            out.update(flatten(v, f"{prefix}{i}."))
        return out or {prefix.rstrip("."): []}
    return {prefix.rstrip("."): data}


def differing_paths(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    fa, fb = flatten(a), flatten(b)
    return {p for p in fa.keys() | fb.keys() if fa.get(p, object()) != fb.get(p, object())}


# What makes a working-memory item (seed §2.2), compared between views.
ITEM_FIELDS = (
    "item_id",
    "kind",
    "content",
    "trust",
    "source_ids",
    "created_at_step",
    "expires_after_step",
)


def as_rows(items: list[Any]) -> list[tuple[Any, ...]]:
    """Working items (``WorkingItem`` or their dicts) as comparable tuples of ITEM_FIELDS."""
    out = []
    for i in items:
        d = i if isinstance(i, dict) else i.as_dict()
        out.append(tuple(tuple(d[f]) if f == "source_ids" else d[f] for f in ITEM_FIELDS))
    return out


def view_of(run_id: str) -> list[Any]:
    """The run's working-memory view at its current step, as the store builds it."""
    step = Run.objects.values_list("step", flat=True).get(pk=run_id)
    return wiring.store().working_view(run_id, step)


def stored_items(run_id: str) -> list[tuple[Any, ...]]:
    """The run's WorkingMemoryItem rows as they are stored, in view order."""
    return [
        (r.item_id, r.kind, r.content, r.trust, tuple(r.source_ids), r.created_at_step,
         r.expires_after_step)
        for r in WorkingMemoryItem.objects.filter(run_id=run_id).order_by("created_at_step", "seq")
    ]  # fmt: skip


def observations_of(run_id: str) -> list[dict[str, Any]]:
    return list(
        Observation.objects.filter(run_id=run_id)
        .order_by("id")
        .values("observation_id", "kind", "trust", "step", "content")
    )


def content_chars(items: list[dict[str, Any]]) -> int:
    return sum(len(i["content"]) for i in items)


def confirmed_write(
    subject: str, key: str, value: str, expected_version: int | None, *, confirmation_id: str
) -> Any:
    """A preference write as a confirmed tool call makes it (no run, no token); must succeed."""
    result = preference_write(
        subject=subject,
        policy=wiring.memory_policies()[key],
        value=value,
        expected_version=expected_version,
        confirmation_id=confirmation_id,
        run_id=None,
        idempotency_token=None,
    )
    assert result.ok, result
    return result
