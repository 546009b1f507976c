"""Reads of runs (STYLE habit 7): exports and lookups, no writes."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Q

from agentconsole.kernel.roles import is_operator, sees_all_runs
from memory import selectors as memory_selectors
from policy import selectors as policy_selectors
from policy.domain.errors import NotFound
from policy.selectors import confirmation_get as confirmation_get  # runs' callers read it here
from runs import models as m
from runs.context import RunsContext, resolve
from runs.domain import trace as ev
from runs.domain.handoff import HandoffStatus
from runs.orm.rows import row_to_state


def run_export(*, run_id: str) -> dict[str, Any]:
    """Everything a scenario reports: state, trace, observations, ledger, memory, artifacts."""
    run = m.Run.objects.filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"no run {run_id}", run_id=run_id)
    return {
        "state": row_to_state(run).public(),
        "trace": list(
            m.TraceEvent.objects.filter(run=run)
            .order_by("sequence")
            .values("sequence", "event", "proposal_id", "details")
        ),
        "observations": list(
            m.Observation.objects.filter(run=run)
            .order_by("id")
            .values("observation_id", "kind", "trust", "step", "content", "content_hash", "citable")
        ),
        "ledger": list(
            m.LedgerEntry.objects.filter(run=run)
            .order_by("id")
            .values(
                "idempotency_token",
                "proposal_id",
                "tool_name",
                "tool_version",
                "arguments_hash",
                "proposal_hash",
                "status",
                "outcome",
                "verification",
                "attempt",
                "step",
            )
        ),
        "grants": policy_selectors.grants_export(run_id=run.pk),
        "confirmations": policy_selectors.confirmations_export(run_id=run.pk),
        "preferences": memory_selectors.preference_records_export(subject=run.subject),
        "artifacts": list(
            m.Artifact.objects.filter(run=run).order_by("id").values("path", "sha256", "size")
        ),
    }


def planner_context(*, run_id: str, ctx: RunsContext | None = None) -> dict[str, Any]:
    """Exactly what the planner would receive for the run's next step: the bounded working
    memory (with trust labels) and the subject's preferences as structured data."""
    runner = resolve(ctx).runner()
    return asdict(runner.context(runner.store.load(run_id)))


def run_observations(*, run_id: str) -> tuple[int, Any]:
    """The run's current step and its observations in order (as values), for memory's rebuild
    of working memory."""
    step = m.Run.objects.values_list("step", flat=True).get(pk=run_id)
    observations = m.Observation.objects.filter(run_id=run_id).order_by("id")
    return step, observations.values("observation_id", "kind", "trust", "step", "content")


def own_runs_q(*, user: Any, prefix: str = "") -> Q:
    """A user's own runs: those they started, and those started for them (their name is the
    run's subject) by someone else — an admin, or a profile run an operator set up.
    ``prefix`` reaches the run through a relation (``"run__"`` from a confirmation)."""
    return Q(**{f"{prefix}owner": user}) | Q(**{f"{prefix}subject": user.get_username()})


@dataclass(frozen=True)
class RunOwnership:
    """Whose a run is, without its row (a ``Run`` has the same two attributes)."""

    owner_id: Any
    subject: str


def is_own_run(*, user: Any, run: m.Run | RunOwnership) -> bool:
    return run.owner_id == user.pk or run.subject == user.get_username()


def may_act_on_run(*, user: Any, run: m.Run | RunOwnership) -> bool:
    """Who may act on a run (cancel it, decide its confirmations): an operator, or its owner
    (started by them or for them)."""
    return is_operator(user) or is_own_run(user=user, run=run)


def runs_visible(*, user: Any) -> Any:
    """Runs a user may see: operators, reviewers and admins all; a user their own (started by
    them or for them)."""
    qs = m.Run.objects.all()
    if sees_all_runs(user):
        return qs
    if not getattr(user, "is_authenticated", False):
        return qs.none()
    return qs.filter(own_runs_q(user=user))


def runs_flagged(runs: Any) -> Any:
    """Of ``runs``, those flagged ``writes_not_applied`` (runs.domain.writes): the condition of
    the partial index ``run_outcome_flagged``, so the newest-first page walks that index."""
    return runs.filter(m.OUTCOME_FLAGGED)


def runs_filtered(
    runs: Any,
    *,
    created_from: datetime | None = None,
    created_before: datetime | None = None,
    tool: str = "",
    stop_reason: str = "",
) -> Any:
    """Of ``runs``, those created in ``[created_from, created_before)``, that stopped for
    ``stop_reason``, and that used ``tool``: a ledger entry of it (it was called) or a
    confirmation of it (it was proposed and a person was asked, approved or not).

    Each condition keeps the query one statement the page's keyset can walk: the time range is
    on ``created_at`` (the order's own column), the stop reason has ``run_stop_reason_created``,
    and the tool is two ``IN (subquery)`` read from ``ledger_tool_run`` and
    ``confirmation_tool_run`` (PostgreSQL hashes each once; no per-row query).
    """
    if created_from is not None:
        runs = runs.filter(created_at__gte=created_from)
    if created_before is not None:
        runs = runs.filter(created_at__lt=created_before)
    if stop_reason:
        runs = runs.filter(stop_reason=stop_reason)
    if tool:
        called = m.LedgerEntry.objects.filter(tool_name=tool).values("run_id")
        asked = policy_selectors.runs_with_tool_confirmations(tool_name=tool)
        runs = runs.filter(Q(pk__in=called) | Q(pk__in=asked))
    return runs


def run_ownership(*, run_id: str) -> RunOwnership | None:
    """Whose a run is (None: no such run). Neither changes after the run is created."""
    row = m.Run.objects.filter(pk=run_id).values_list("owner_id", "subject").first()
    return None if row is None else RunOwnership(owner_id=row[0], subject=row[1])


def sees_run(*, user: Any, run: m.Run | RunOwnership) -> bool:
    """``runs_visible``'s rule for one run whose ownership is known: an open trace socket asks
    it on every doorbell, and an owner's answer needs no query (roles are read only if not)."""
    return is_own_run(user=user, run=run) or sees_all_runs(user)


def access_run(*, user: Any, run_id: str) -> m.Run:
    """The run, if ``user`` may see it. A foreign run is 'not found': its existence is not
    disclosed."""
    run = runs_visible(user=user).filter(pk=run_id).first()
    if run is None:
        raise NotFound("no such run", run_id=run_id)
    return run


# What holds a confirmation's proposal, in the trace: the provenance the runtime computed and the
# confirmation layer's verdict, both committed with the wait (runs.domain.step.decide).
_HELD = (ev.PROPOSAL_PROVENANCE, ev.POLICY_CONFIRMATION_CHECKED, ev.PROPOSAL_WAITING_CONFIRMATION)
Recorded = tuple[dict[str, Any] | None, dict[str, Any] | None]


def recorded_provenance(*, wanted: Mapping[str, tuple[str, str | None]]) -> dict[str, Recorded]:
    """For each confirmation id → (run id, proposal id): the details of the ``proposal.
    provenance`` and ``policy.confirmation.checked`` events of the step that asked for it, or
    (None, None) when the trace has no such wait (a scenario's confirmation, an older run).

    One query whatever the number of confirmations: the events of those proposals (the run's
    (run, sequence) index narrows to the run, the proposal id to its few events). The step
    that asked is the last ``proposal.waiting-confirmation`` naming the confirmation; the
    other two events are the last of theirs before it (one commit emits all three; a proposal
    id the planner reused at another step has its own, earlier or later, wait)."""
    pairs = {(run_id, pid) for run_id, pid in wanted.values() if pid}
    if not pairs:
        return {}
    which = Q()
    for run, proposal in sorted(pairs):
        which |= Q(run_id=run, proposal_id=proposal)
    rows = (
        m.TraceEvent.objects.filter(which, event__in=_HELD)
        .order_by("run_id", "sequence")
        .values_list("run_id", "proposal_id", "sequence", "event", "details")
    )
    events: dict[tuple[str, str | None], list[tuple[int, str, dict[str, Any]]]] = {}
    for run_id, pid, seq, event, details in rows:
        events.setdefault((run_id, pid), []).append((seq, event, details or {}))
    return {cid: _held(events.get(key, []), cid) for cid, key in wanted.items()}


def _held(events: list[tuple[int, str, dict[str, Any]]], confirmation_id: str) -> Recorded:
    waits = [
        seq
        for seq, event, details in events
        if event == ev.PROPOSAL_WAITING_CONFIRMATION
        and details.get("confirmation_id") == confirmation_id
    ]
    if not waits:
        return None, None
    before = [(seq, event, details) for seq, event, details in events if seq < max(waits)]
    prov = [d for _, e, d in before if e == ev.PROPOSAL_PROVENANCE]
    checked = [
        d
        for _, e, d in before
        if e == ev.POLICY_CONFIRMATION_CHECKED and d.get("result") == "required"
    ]
    return (prov[-1] if prov else None), (checked[-1] if checked else None)


def cited_observations(
    *, cited: Mapping[str, Collection[str]]
) -> dict[tuple[str, str], dict[str, Any]]:
    """The observations proposals cite, by ``(run_id, observation_id)``: kind, trust label,
    step and content. One query however many runs are asked about (the operator queue's
    provenance); none when nothing is cited. An id a run does not have is simply absent."""
    wanted = Q()
    for run_id, ids in cited.items():
        if ids:
            wanted |= Q(run_id=run_id, observation_id__in=list(ids))
    if not wanted:
        return {}
    rows = (
        m.Observation.objects.filter(wanted)
        .order_by()
        .values("run_id", "observation_id", "kind", "trust", "step", "content")
    )
    return {(row["run_id"], row["observation_id"]): dict(row) for row in rows}


def queue_counts() -> dict[str, int]:
    """Two indexed counts: the operator queue and the handoff inbox."""
    return {
        "pending_confirmations": policy_selectors.pending_confirmations_count(),
        "open_handoffs": m.Handoff.objects.exclude(status=HandoffStatus.RESOLVED).count(),
    }


# ---- the counts /metrics shows (agentconsole.ops.metrics): plain values, one grouped query each


def runs_by_status() -> dict[str, int]:
    rows = m.Run.objects.order_by().values("status").annotate(n=Count("id"))
    return {row["status"]: row["n"] for row in rows}


def unresolved_handoffs_by_status() -> dict[str, int]:
    """Open and claimed handoffs, each status named even when there are none."""
    counts = dict.fromkeys((HandoffStatus.OPEN.value, HandoffStatus.CLAIMED.value), 0)
    rows = (
        m.Handoff.objects.exclude(status=HandoffStatus.RESOLVED.value)
        .order_by()
        .values("status")
        .annotate(n=Count("id"))
    )
    counts.update({row["status"]: row["n"] for row in rows})
    return counts


def tool_calls_by_status() -> dict[tuple[str, str], int]:
    """Ledger rows by (tool name, status)."""
    rows = m.LedgerEntry.objects.order_by().values("tool_name", "status").annotate(n=Count("id"))
    return {(row["tool_name"], row["status"]): row["n"] for row in rows}
