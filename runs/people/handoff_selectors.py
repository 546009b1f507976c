"""Reads for the handoff inbox and the bundle view (console pages; the API reads the rows).

The rules of who may claim or resolve and which commands fit a handoff live in
``runs.domain.handoff``; these selectors only gather what the rules and the page need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models.functions import Left

from policy.domain.canonical import pretty_json
from runs import models as m
from runs.domain import trace as ev
from runs.domain.handoff import (
    RESOLUTION_TEXT,
    RUN_ACTIONS,
    UNSETTLED_EFFECTS,
    HandoffStatus,
    allowed_resolutions,
    resolver_refusal,
)


def unsettled_effect(*, run_id: str) -> m.LedgerEntry | None:
    """The ledger row a handoff settles: the run's latest row whose effect is not settled."""
    return (
        m.LedgerEntry.objects.filter(run_id=run_id, status__in=UNSETTLED_EFFECTS)
        .order_by("-id")
        .first()
    )


def can_compensate(*, row: m.LedgerEntry, registry: Any) -> bool:
    """Whether the row's tool (that exact version) is registered and declares compensate()."""
    registered = registry.get(row.tool_name, row.tool_version)
    return registered is not None and registered.contract.compensate is not None


# The inbox shows the oldest this many; the rest wait their turn (the count says how many).
INBOX_LIMIT = 100
GOAL_HEAD = 200


@dataclass(frozen=True)
class InboxRow:
    id: int
    reason: str
    status: str
    run_id: str
    goal: str
    subject: str
    opened_at: datetime
    claimed_by: str | None


@dataclass(frozen=True)
class Inbox:
    rows: list[InboxRow]
    total: int  # unresolved handoffs matching the filter, shown or not
    reasons: list[str]  # the reasons of every unresolved handoff (the filter's choices)


def handoff_inbox(*, reason: str | None = None, limit: int | None = None) -> Inbox:
    """Unresolved handoffs (open and claimed: both still need a person), oldest first.

    Three queries whatever the inbox holds: the page of rows (with their run and claimant
    joined), the count, and the reasons for the filter. The bundle is not read here."""
    limit = limit or INBOX_LIMIT
    unresolved = m.Handoff.objects.exclude(status=HandoffStatus.RESOLVED)
    matching = unresolved.filter(reason=reason) if reason else unresolved
    # The row's own columns, the head of the run's goal (a goal may be long; the row shows
    # 140 characters), its subject and the claimant's name: one query.
    shown = ("id", "reason", "status", "opened_at", "run__id", "run__subject")
    page = (
        matching.select_related("run", "assignee")
        .only(*shown, "run", "assignee", "assignee__username")
        .annotate(goal_head=Left("run__goal", GOAL_HEAD))
        .order_by("opened_at", "id")[:limit]
    )
    rows = [
        InboxRow(
            id=h.pk,
            reason=h.reason,
            status=h.status,
            run_id=h.run.id,
            goal=h.goal_head,
            subject=h.run.subject,
            opened_at=h.opened_at,
            claimed_by=h.claimant_name,
        )
        for h in page
    ]
    total = matching.count()
    reasons = list(unresolved.order_by("reason").values_list("reason", flat=True).distinct())
    return Inbox(rows=rows, total=total, reasons=reasons)


@dataclass(frozen=True)
class Effect:
    """An effect the bundle names, with its ledger row's status now (it may be settled since)."""

    token: str
    tool: str
    version: str
    status_at_handoff: str
    status_now: str | None
    attempt: int | None
    outcome: str  # pretty JSON, for reading
    verification: str

    @property
    def settled(self) -> bool:
        return self.status_now is not None and self.status_now not in UNSETTLED_EFFECTS


@dataclass(frozen=True)
class Resolution:
    action: str
    by: str
    reason: str
    at: datetime | None
    details: list[tuple[str, str]]  # what the command found or did, for reading


@dataclass(frozen=True)
class Action:
    name: str
    label: str
    help: str

    @property
    def ends_run(self) -> bool:
        return self.name in RUN_ACTIONS


@dataclass(frozen=True)
class ShownObservation:
    observation_id: str
    trust: str
    kind: str
    text: str  # shown as text, never as HTML

    @property
    def long(self) -> bool:
        return len(self.text) > LONG_TEXT


# Longer texts are folded: the first part shows, the rest one click away.
LONG_TEXT = 600


@dataclass
class BundleView:
    handoff: m.Handoff
    bundle: dict[str, Any]
    claimed_by: str | None
    effects: list[Effect]
    observations: list[ShownObservation]
    proposal: str  # pretty JSON of the pending (or repeated) proposal, "" when none
    required: str  # pretty JSON of the required capability/confirmation, "" when none
    actions: list[Action] = field(default_factory=list)
    may_claim: bool = False
    may_resolve: bool = False
    resolution: Resolution | None = None


def handoff_bundle(
    *, handoff_id: int, user: Any, reviewer: bool, admin: bool, registry: Any
) -> BundleView | None:
    """Everything the bundle page shows, or None when there is no such handoff.

    ``reviewer``/``admin``: the person's roles (the page checked they may read handoffs at
    all); they decide whether claim and resolve are offered, by the same rule the service
    applies (``resolver_refusal``)."""
    handoff = m.Handoff.objects.select_related("assignee").filter(pk=handoff_id).first()
    if handoff is None:
        return None
    bundle = handoff.bundle if isinstance(handoff.bundle, dict) else {}
    view = BundleView(
        handoff=handoff,
        bundle=bundle,
        claimed_by=handoff.claimant_name,
        effects=_effects(handoff.run_id, bundle.get("unknown_effects") or []),
        observations=[
            ShownObservation(
                observation_id=str(o.get("observation_id", "")),
                trust=str(o.get("trust", "")),
                kind=str(o.get("kind", "")),
                text=o["content"]
                if isinstance(o.get("content"), str)
                else _pretty(o.get("content")),
            )
            for o in bundle.get("last_trusted_observations") or []
            if isinstance(o, dict)
        ],
        proposal=_pretty(bundle["pending_proposal"]) if bundle.get("pending_proposal") else "",
        required=_pretty(bundle["required"]) if bundle.get("required") else "",
    )
    if handoff.status == HandoffStatus.RESOLVED:
        view.resolution = _resolution(handoff)
        return view
    view.may_claim = reviewer and handoff.status == HandoffStatus.OPEN
    view.may_resolve = reviewer and (
        resolver_refusal(
            status=handoff.status,
            assignee_id=handoff.assignee_id,
            user_id=user.pk,
            user_is_admin=admin,
        )
        is None
    )
    if view.may_resolve:
        row = unsettled_effect(run_id=handoff.run_id)
        allowed = allowed_resolutions(
            effect_status=row.status if row is not None else None,
            can_compensate=row is not None and can_compensate(row=row, registry=registry),
        )
        view.actions = [Action(a, *RESOLUTION_TEXT[a]) for a in allowed]
    return view


def _effects(run_id: str, named: list[Any]) -> list[Effect]:
    tokens = [e.get("idempotency_token") for e in named if isinstance(e, dict)]
    now = dict(
        m.LedgerEntry.objects.filter(run_id=run_id, idempotency_token__in=tokens).values_list(
            "idempotency_token", "status"
        )
    )
    return [
        Effect(
            token=str(e.get("idempotency_token", "")),
            tool=str(e.get("tool", "")),
            version=str(e.get("version", "")),
            status_at_handoff=str(e.get("status", "")),
            status_now=now.get(str(e.get("idempotency_token"))),
            attempt=e.get("attempt"),
            outcome=_pretty(e.get("outcome")),
            verification=_pretty(e.get("verification")),
        )
        for e in named
        if isinstance(e, dict)
    ]


def _pretty(value: Any) -> str:
    """Indented JSON for reading (keys sorted, non-ASCII kept); "" for nothing."""
    return "" if value in (None, {}) else pretty_json(value)


def _resolution(handoff: m.Handoff) -> Resolution:
    """Who resolved it and why: the run's ``handoff.resolved`` event for this handoff (the
    handoff row keeps what was done; the trace keeps who and why)."""
    event = (
        m.TraceEvent.objects.filter(
            run_id=handoff.run_id, event=ev.HANDOFF_RESOLVED, details__handoff=handoff.pk
        )
        .order_by("-sequence")
        .first()
    )
    details = event.details if event is not None else {}
    result = handoff.resolution if isinstance(handoff.resolution, dict) else {}
    return Resolution(
        action=str(result.get("action") or details.get("action", "")),
        by=str(details.get("by", "")),
        reason=str(details.get("reason", "")),
        at=handoff.resolved_at,
        details=[(k.replace("_", " "), str(v)) for k, v in result.items() if k != "action"],
    )
