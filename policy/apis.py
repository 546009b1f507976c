"""HTTP API of confirmations and grants: the operator queue, a confirmation with its provenance,
the decision, and a run's grants. Policy owns both records: their models, services (writes,
``policy.services``), selectors (``policy.selectors``, ``confirmation_selectors``,
``provenance_selectors``) and this API; other apps call those, never the models (issue 25
item 4). The provenance is what the runtime recorded in the run's trace, with the observations
it names: runs' reads (``runs.selectors``), handed to ``policy.provenance_selectors``.

A decision crosses between policy and runs three times, each one the design needs:

1. ``_decide`` (here) -> ``runs.services.confirmation_decide``: a decision is the run's
   transition (the run waits on it), so the run side takes the run's row lock first, as every
   commit of the run does (another lock order could deadlock with a step or the sweeper).
2. -> ``policy.services.confirmation_for_decision``: under that lock, the record as a plain
   value (``PendingConfirmation``: still pending, still the proposal shown, with the approvals
   already given); the approver rule (``policy.domain.confirmation.approvers``) and the run's rules
   (``runs.domain.lifecycle``) turn it into the run's commit, in plain Python.
3. ``runs.orm.writers`` -> ``policy.services.confirmation_record_decision`` (or
   ``confirmation_approval_record``, the first of four eyes): the record's write, inside the
   run's one commit transaction, so the confirmation and the run move together or not at all.

An edit and a note (``runs.people.answers``) take the same path with their own commit.

Every error leaves as ``{code, message, extra}`` through
``agentconsole.kernel.http.exception_handler``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentconsole import wiring
from agentconsole.kernel.http import StrictSerializer, validated
from agentconsole.kernel.roles import is_operator, is_reviewer
from policy import provenance_selectors as policy_provenance
from policy.domain.confirmation.approvers import approvals_needed, approver_rule
from policy.domain.confirmation.confirmations import ConfirmationStatus
from policy.domain.errors import NotFound
from policy.models import Confirmation, ConfirmationApproval, Grant
from runs import selectors as run_selectors
from runs import services as run_services
from runs.domain.lifecycle import MAX_DECISION_REASON
from runs.domain.machine import Status
from runs.people import answers as run_answers
from runs.people import batch as run_batch

MAX_PAGE = 200  # the page cap of every list in the API (as runs.apis.MAX_PAGE)


class GrantOut(serializers.ModelSerializer):
    class Meta:
        model = Grant
        fields = ["id", "capability", "resource_scope", "expires_at_step", "max_calls",
                  "calls_used", "constraints", "created_at"]  # fmt: skip


# A run's grants, to whoever may see the run (no docstring: it would be the schema's text).
class RunGrants(APIView):
    @extend_schema(responses=GrantOut(many=True))
    def get(self, request: Request, run_id: str) -> Response:
        run = run_selectors.access_run(user=request.user, run_id=run_id)
        rows = Grant.objects.filter(run_id=run.pk).order_by("id")[:1000]
        return Response(GrantOut(rows, many=True).data)


class ApprovalOut(serializers.ModelSerializer):
    by = serializers.CharField(source="username")

    class Meta:
        model = ConfirmationApproval
        fields = ["by", "reason", "approved_at"]


class ConfirmationOut(serializers.ModelSerializer):
    confirmation_id = serializers.CharField(source="id")
    run_id = serializers.CharField()
    decided_by = serializers.CharField(source="decided_by.username", default=None)
    # Who may decide it, how many approvals it needs, and every approval given so far.
    approvals = ApprovalOut(many=True, read_only=True)
    approvals_needed = serializers.SerializerMethodField()
    # A person's edit (issue 24 item 1): the confirmation this proposal was edited from, and
    # what changed ([{path, op, from, to}], values as shown, secrets masked); null otherwise.
    edited_from = serializers.CharField(allow_blank=True)

    class Meta:
        model = Confirmation
        fields = [
            "confirmation_id", "run_id", "tool_name", "tool_version", "proposal",
            "proposal_hash", "status", "cites_untrusted", "expires_at_step", "origin",
            "requested_at", "decided_at", "decided_by", "decision_reason",
            "approvers", "approvals_needed", "approvals", "edited_from", "edit_diff",
        ]  # fmt: skip

    def get_approvals_needed(self, row: Confirmation) -> int:
        return approvals_needed(approver_rule(row.approvers))


def _visible(user: Any) -> Any:
    qs = Confirmation.objects.all()
    if is_operator(user) or is_reviewer(user):
        return qs
    # The same rule as the runs they belong to (runs.selectors.runs_visible).
    return qs.filter(run_selectors.own_runs_q(user=user, prefix="run__"))


def _confirmations_visible(user: Any) -> Any:
    return _visible(user).select_related("decided_by").prefetch_related("approvals")


class ConfirmationList(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("status", str)], responses=ConfirmationOut(many=True)
    )
    def get(self, request: Request) -> Response:
        wanted = request.query_params.get("status", "pending")
        qs = _confirmations_visible(request.user).filter(status=wanted).order_by("-requested_at")
        return Response(ConfirmationOut(qs[:MAX_PAGE], many=True).data)


class ConfirmationDetail(APIView):
    @extend_schema(responses=ConfirmationOut)
    def get(self, request: Request, confirmation_id: str) -> Response:
        c = _confirmations_visible(request.user).filter(pk=confirmation_id).first()
        if c is None:
            raise NotFound("no such confirmation")
        data = ConfirmationOut(c).data
        data["provenance"] = policy_provenance.confirmation_provenance(
            c,
            recorded=run_selectors.recorded_provenance,
            observations=run_selectors.cited_observations,
        )
        return Response(data)


class DecisionIn(StrictSerializer):
    proposal_hash = serializers.RegexField(r"^[0-9a-f]{64}$")
    reason = serializers.CharField(allow_blank=True, max_length=MAX_DECISION_REASON, default="")


def _actionable(request: Request, confirmation_id: str) -> str:
    """The run of a confirmation this person may answer at all; 404 when they cannot see it,
    403 when they are no operator and not the run's own person (the confirmation's approver
    rule then narrows that in the service: APPROVER_NOT_ALLOWED)."""
    # Only what the check needs: the run's id, owner and subject (one query, no run row).
    found = (
        _visible(request.user)
        .filter(pk=confirmation_id)
        .values_list("run_id", "run__owner_id", "run__subject")
        .first()
    )
    if found is None:
        raise NotFound("no such confirmation")
    run_id, owner_id, subject = found
    # Nobody but an operator or the run's own person ever decides (a reviewer: 403).
    ownership = run_selectors.RunOwnership(owner_id=owner_id, subject=subject)
    if not run_selectors.may_act_on_run(user=request.user, run=ownership):
        raise PermissionDenied("only operators or the run's owner decide confirmations")
    return str(run_id)


def _decide(request: Request, confirmation_id: str, *, approved: bool) -> Response:
    run_id = _actionable(request, confirmation_id)
    data = validated(DecisionIn, request.data)
    run_services.confirmation_decide(
        confirmation_id=confirmation_id,
        approved=approved,
        shown_hash=data["proposal_hash"],
        by=request.user,
        reason=data["reason"],
        enqueue=True,
        ctx=wiring.context(),
        run_id=run_id,
    )
    c = _confirmations_visible(request.user).get(pk=confirmation_id)
    if approved and c.status == ConfirmationStatus.PENDING.value:
        # One approval of two (four eyes): recorded, the run still waits for another person.
        return Response(ConfirmationOut(c).data, status=202)
    return Response(ConfirmationOut(c).data)


class ConfirmationApprove(APIView):
    @extend_schema(request=DecisionIn, responses={200: ConfirmationOut, 202: ConfirmationOut})
    def post(self, request: Request, confirmation_id: str) -> Response:
        return _decide(request, confirmation_id, approved=True)


class ConfirmationDecline(APIView):
    @extend_schema(request=DecisionIn, responses=ConfirmationOut)
    def post(self, request: Request, confirmation_id: str) -> Response:
        return _decide(request, confirmation_id, approved=False)


class EditIn(StrictSerializer):
    proposal_hash = serializers.RegexField(r"^[0-9a-f]{64}$")
    # Any JSON here: the service says what is wrong with it (EDIT_ARGUMENTS_INVALID, as the
    # console's form does), not a serializer.
    arguments = serializers.JSONField()
    reason = serializers.CharField(allow_blank=True, max_length=MAX_DECISION_REASON, default="")


class EditOut(serializers.Serializer):
    edited = ConfirmationOut(help_text="the confirmation that was edited (status edited)")
    confirmation = ConfirmationOut(
        allow_null=True, help_text="the edited call's; null when it needs no confirmation"
    )
    run_status = serializers.CharField()


class ConfirmationEdit(APIView):
    """Edit the arguments of the waiting proposal and approve the edited call as far as the
    approver rule lets you: 200 when the run goes on with it, 202 when it waits for a second
    approver (four eyes)."""

    @extend_schema(request=EditIn, responses={200: EditOut, 202: EditOut})
    def post(self, request: Request, confirmation_id: str) -> Response:
        run_id = _actionable(request, confirmation_id)
        data = validated(EditIn, request.data)
        edited = run_answers.confirmation_edit(
            confirmation_id=confirmation_id,
            shown_hash=data["proposal_hash"],
            arguments=data["arguments"],
            by=request.user,
            reason=data["reason"],
            enqueue=True,
            ctx=wiring.context(),
            run_id=run_id,
        )
        rows = _confirmations_visible(request.user).in_bulk(
            [confirmation_id, edited.confirmation_id or confirmation_id]
        )
        new = rows.get(edited.confirmation_id) if edited.confirmation_id else None
        body = {
            "edited": ConfirmationOut(rows[confirmation_id]).data,
            "confirmation": ConfirmationOut(new).data if new is not None else None,
            "run_status": edited.state.status.value,
        }
        waiting = edited.state.status is Status.WAITING_CONFIRMATION
        return Response(body, status=202 if waiting else 200)


class RespondIn(StrictSerializer):
    proposal_hash = serializers.RegexField(r"^[0-9a-f]{64}$")
    # Bounded and required by the service (NOTE_REQUIRED, NOTE_TOO_LONG), as in the console.
    note = serializers.CharField(allow_blank=True, trim_whitespace=False, default="")


class ConfirmationRespond(APIView):
    """Answer the waiting proposal with a note for the planner instead of a decision."""

    @extend_schema(request=RespondIn, responses=ConfirmationOut)
    def post(self, request: Request, confirmation_id: str) -> Response:
        run_id = _actionable(request, confirmation_id)
        data = validated(RespondIn, request.data)
        run_answers.confirmation_respond(
            confirmation_id=confirmation_id,
            shown_hash=data["proposal_hash"],
            note=data["note"],
            by=request.user,
            enqueue=True,
            ctx=wiring.context(),
            run_id=run_id,
        )
        return Response(
            ConfirmationOut(_confirmations_visible(request.user).get(pk=confirmation_id)).data
        )


class BatchIn(StrictSerializer):
    proposal_hash = serializers.RegexField(r"^[0-9a-f]{64}$")
    confirmation_ids = serializers.ListField(
        child=serializers.CharField(max_length=128),
        min_length=1,
        max_length=run_batch.MAX_BATCH,
    )
    decision = serializers.ChoiceField(choices=["approve", "decline"])
    reason = serializers.CharField(allow_blank=True, max_length=MAX_DECISION_REASON, default="")


class BatchOutcomeOut(serializers.Serializer):
    confirmation_id = serializers.CharField()
    run_id = serializers.CharField(allow_null=True)
    outcome = serializers.ChoiceField(
        choices=["approved", "declined", "approval_recorded", "refused"]
    )
    code = serializers.CharField(allow_blank=True)
    message = serializers.CharField(allow_blank=True)


class BatchOut(serializers.Serializer):
    decided = serializers.IntegerField()
    refused = serializers.IntegerField()
    results = BatchOutcomeOut(many=True)


class ConfirmationBatch(APIView):
    """Identical proposals (one tool, one exact arguments hash) waiting in several runs, decided
    together: each one through the single decision (its hash check, its approver rule, its own
    transaction). 200 with every outcome when at least one was decided; 409
    BATCH_NOTHING_DECIDED when none was (the outcomes in ``extra.results``)."""

    @extend_schema(request=BatchIn, responses={200: BatchOut})
    def post(self, request: Request) -> Response:
        if not is_operator(request.user):
            raise PermissionDenied("only operators decide confirmations in a batch")
        data = validated(BatchIn, request.data)
        outcomes = run_batch.confirmations_decide_batch(
            confirmation_ids=data["confirmation_ids"],
            approved=data["decision"] == "approve",
            shown_hash=data["proposal_hash"],
            by=request.user,
            reason=data["reason"],
            enqueue=True,
            ctx=wiring.context(),
        )
        results = [BatchOutcomeOut(o).data for o in outcomes]
        refused = sum(1 for o in outcomes if o.refused)
        if refused == len(outcomes):
            raise run_batch.NothingDecided("None of them was decided.", results=results)
        return Response(
            {"decided": len(outcomes) - refused, "refused": refused, "results": results}
        )
