"""Reads of runs (STYLE habit 7): exports and lookups, no writes."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.db.models import Q

from memory.models import PreferenceRecord
from policy import selectors as policy_selectors
from policy.domain.errors import NotFound
from policy.models import Confirmation
from policy.roles import sees_all_runs
from policy.selectors import confirmation_get as confirmation_get  # runs' callers read it here
from runs import models as m
from runs.context import RunsContext, resolve
from runs.domain.handoff import HandoffStatus
from runs.rows import row_to_state


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
        "preferences": list(
            PreferenceRecord.objects.filter(subject=run.subject)
            .order_by("key")
            .values(
                "key",
                "value",
                "version",
                "source_kind",
                "confirmation_id",
                "created_by_run",
                "revoked_at",
            )
        ),
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


def runs_visible(*, user: Any) -> Any:
    """Runs a user may see: operators, reviewers and admins all; a user their own and the runs
    started for them (subject = their name) by someone else (issue 11 item 7)."""
    qs = m.Run.objects.all()
    if sees_all_runs(user):
        return qs
    return qs.filter(Q(owner=user) | Q(subject=user.get_username()))


def access_run(*, user: Any, run_id: str) -> m.Run:
    """The run, if ``user`` may see it. A foreign run is 'not found': its existence is not
    disclosed."""
    run = runs_visible(user=user).filter(pk=run_id).first()
    if run is None:
        raise NotFound("no such run", run_id=run_id)
    return run


def confirmation_provenance(*, confirmation: Confirmation) -> list[dict[str, Any]]:
    """Which observations the pending proposal cites, with their trust labels."""
    cited = (confirmation.proposal or {}).get("source_observation_ids") or []
    trust = dict(
        m.Observation.objects.filter(run_id=confirmation.run_id, observation_id__in=cited)
        .order_by()
        .values_list("observation_id", "trust")
    )
    return [{"observation_id": i, "trust": trust.get(i, "missing")} for i in cited]


def queue_counts() -> dict[str, int]:
    """Two indexed counts: the operator queue and the handoff inbox."""
    return {
        "pending_confirmations": policy_selectors.pending_confirmations_count(),
        "open_handoffs": m.Handoff.objects.exclude(status=HandoffStatus.RESOLVED).count(),
    }
