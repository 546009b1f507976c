"""What the soak asserts at the end, read from PostgreSQL (the truth) and the external effect log.

Each check returns a ``Check``: a name, whether it held, a count of offenders and a few of them
as evidence. ``run_checks`` runs them all; the soak passes only if every one holds.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Max, Min
from django.utils import timezone

from runs import models as m
from runs.domain import trace as ev
from runs.domain.ledger import LedgerStatus
from runs.domain.machine import TERMINAL, Status
from runs.engine.leases import HELD_BY_WORKER

TERMINAL_VALUES = frozenset(s.value for s in TERMINAL)
# Waiting for a person: a confirmation to decide. (A run stopped with an open handoff is terminal,
# ``failed``, and waits for a reviewer too; it is counted with the terminal runs.)
WAITING_VALUES = frozenset({Status.WAITING_CONFIRMATION.value})
# Neither: a worker should be advancing the run.
ACTIVE_VALUES = [Status.CREATED.value, Status.RUNNING.value, Status.CANCELLING.value]
WRITE_TOOLS = ("soak_write", "soak_write_blind")
# Ledger rows of a write that say the effect happened (the log must then hold exactly one line).
EFFECT_PRESENT = frozenset({LedgerStatus.SUCCEEDED.value, LedgerStatus.RECONCILED.value})
EVIDENCE = 5


@dataclass
class Check:
    name: str
    ok: bool
    offenders: int = 0
    evidence: list[str] = field(default_factory=list)
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check(name: str, offenders: list[str], detail: str = "") -> Check:
    return Check(name, not offenders, len(offenders), offenders[:EVIDENCE], detail)


def runs_settled(run_ids: Collection[str]) -> Check:
    """Every run is terminal or waiting for a person; none missing."""
    statuses = dict(m.Run.objects.filter(pk__in=run_ids).values_list("id", "status"))
    offenders = [
        f"{r}: {statuses.get(r, 'missing')}"
        for r in run_ids
        if statuses.get(r) not in TERMINAL_VALUES | WAITING_VALUES
    ]
    counts = Counter(statuses.values())
    return _check("every run terminal or waiting for a person", offenders, _fmt(counts))


def effects_once(effects: Iterable[dict[str, Any]]) -> tuple[Check, int]:
    """The external log holds at most one effect per idempotency token and per ``entry`` (one
    planned command: a second execution under a new token would show here)."""
    lines = [e for e in effects if e["tool"] in WRITE_TOOLS]
    per_token = Counter(e["token"] for e in lines)
    per_entry = Counter(e["entry"] for e in lines)
    offenders = [f"token {t[:16]}…: {n} effects" for t, n in per_token.items() if n > 1]
    offenders += [f"entry {e}: {n} effects" for e, n in per_entry.items() if n > 1]
    duplicates = sum(n - 1 for n in per_token.values() if n > 1) + sum(
        n - 1 for n in per_entry.values() if n > 1
    )
    check = _check("no effect duplicated in the external log", offenders, f"{len(lines)} effects")
    return check, duplicates


def ledger_agrees(run_ids: Collection[str], effects: Iterable[dict[str, Any]]) -> Check:
    """One ledger row per token, and a write the ledger calls done (succeeded or reconciled) has
    exactly one effect in the log; an effect always has its ledger row (intent before effect)."""
    per_token = Counter(e["token"] for e in effects if e["tool"] in WRITE_TOOLS)
    rows = list(
        m.LedgerEntry.objects.filter(run_id__in=run_ids, tool_name__in=WRITE_TOOLS).values_list(
            "idempotency_token", "status", "run_id"
        )
    )
    offenders = []
    tokens = Counter(t for t, _, _ in rows)
    offenders += [f"token {t[:16]}…: {n} ledger rows" for t, n in tokens.items() if n > 1]
    for token, status, run_id in rows:
        if status in EFFECT_PRESENT and per_token[token] != 1:
            offenders.append(f"{run_id} {status} but {per_token[token]} effects")
    offenders += [f"effect {t[:16]}… has no ledger row" for t in per_token if t not in tokens]
    return _check("ledger agrees with the external log", offenders, f"{len(rows)} write rows")


def no_started_rows(run_ids: Collection[str]) -> Check:
    """A settled run holds no ``started`` ledger row: every intent was settled."""
    rows = m.LedgerEntry.objects.filter(
        run_id__in=run_ids, status=LedgerStatus.STARTED.value
    ).values_list("run_id", "tool_name")
    return _check("no unsettled ledger intent", [f"{r}: {t} started" for r, t in rows])


def traces_complete(run_ids: Collection[str]) -> Check:
    """Every trace is 1..n without holes; a terminal run's trace has its ``run.stopped``."""
    shape = (
        m.TraceEvent.objects.filter(run_id__in=run_ids)
        .values("run_id")
        .annotate(n=Count("id"), lo=Min("sequence"), hi=Max("sequence"))
    )
    by_run = {row["run_id"]: row for row in shape}
    stopped = set(
        m.TraceEvent.objects.filter(run_id__in=run_ids, event=ev.RUN_STOPPED).values_list(
            "run_id", flat=True
        )
    )
    statuses = dict(m.Run.objects.filter(pk__in=run_ids).values_list("id", "status"))
    offenders = []
    for run_id in run_ids:
        row = by_run.get(run_id)
        if row is None:
            offenders.append(f"{run_id}: no trace")
        elif not (row["lo"] == 1 and row["hi"] == row["n"]):
            offenders.append(f"{run_id}: {row['n']} events over {row['lo']}..{row['hi']}")
        elif statuses.get(run_id) in TERMINAL_VALUES and run_id not in stopped:
            offenders.append(f"{run_id}: {statuses[run_id]} without {ev.RUN_STOPPED}")
    events = sum(row["n"] for row in by_run.values())
    return _check("every trace complete and gap-free", offenders, f"{events} events")


def leases_live(run_ids: Collection[str], live_pids: Collection[int]) -> Check:
    """No run's lease is held (unexpired) by a process that is not a live worker. The owner is
    ``host:pid:nonce`` (``runs.engine.leases.new_owner``); a hand-back name holds nothing."""
    now = timezone.now()
    held = (
        m.Run.objects.filter(pk__in=run_ids, lease_expires_at__gt=now)
        .filter(HELD_BY_WORKER)
        .values_list("id", "lease_owner")
    )
    offenders = []
    for run_id, owner in held:
        pid = owner_pid(owner)
        if pid not in live_pids:
            offenders.append(f"{run_id}: held by {owner} (dead)")
    return _check("no lease held by a dead worker", offenders)


def owner_pid(owner: str | None) -> int | None:
    """The pid in a lease owner ``host:pid:nonce`` (``runs.engine.leases.new_owner``)."""
    parts = (owner or "").split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


def _fmt(counts: Counter[str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


def plans_followed(planned: dict[str, str | None], effects: Iterable[dict[str, Any]]) -> Check:
    """No proposal was refused (the soak's runs are all valid), and a completed run that planned
    a write made it exactly once: a run that skipped its write would pass every other check."""
    rejected = m.TraceEvent.objects.filter(
        run_id__in=list(planned), event=ev.PROPOSAL_REJECTED
    ).values_list("run_id", "details")
    offenders = [f"{r}: proposal rejected {d.get('code')}" for r, d in rejected]
    per_entry = Counter(e["entry"] for e in effects if e["tool"] in WRITE_TOOLS)
    completed = m.Run.objects.filter(pk__in=list(planned), status=Status.COMPLETED.value)
    for run_id in completed.values_list("id", flat=True):
        entry = planned[run_id]
        if entry is not None and per_entry[entry] != 1:
            offenders.append(f"{run_id}: completed with {per_entry[entry]} effects of {entry}")
    return _check("every completed run did its planned write once", offenders)


def run_checks(
    planned: dict[str, str | None], effects: list[dict[str, Any]], live_pids: Collection[int]
) -> tuple[list[Check], int]:
    """All checks (``planned``: run id → the entry of its planned write, or None), and the
    number of duplicated effects."""
    run_ids = list(planned)
    effect_check, duplicates = effects_once(effects)
    checks = [
        plans_followed(planned, effects),
        runs_settled(run_ids),
        effect_check,
        ledger_agrees(run_ids, effects),
        no_started_rows(run_ids),
        traces_complete(run_ids),
        leases_live(run_ids, live_pids),
    ]
    return checks, duplicates
