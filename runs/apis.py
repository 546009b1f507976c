"""HTTP API of runs, trace, confirmations and handoffs: thin views over services and selectors.

One APIView per operation, nested input/output serializers (HackSoft style). Errors leave as
``{code, message, extra}`` through ``agentconsole.kernel.http.exception_handler``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, Throttled
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentconsole import wiring
from agentconsole.kernel.http import StrictSerializer, validated
from agentconsole.kernel.roles import is_admin, is_operator, is_reviewer
from policy.domain.errors import NotFound
from runs import models as m
from runs import selectors, services
from runs.domain.budgets import (
    MAX_DEADLINE_MS,
    MAX_REPEATED_PROPOSAL_CEILING,
    MAX_STEPS_CEILING,
    MAX_TOKENS_CEILING,
    RunBudgets,
)
from runs.domain.console import timeline
from runs.domain.gateway import model_planning
from runs.domain.machine import Status
from runs.domain.writes import OUTCOME_FLAGS
from runs.people import handoffs
from runs.start import profile_apis
from runs.start.limits import LimitError

MAX_PAGE = 200


class RunCursor(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE


def _page(view: APIView, request: Request, qs: QuerySet[m.Run], serializer: type) -> Response:
    paginator = RunCursor()
    page = paginator.paginate_queryset(qs, request, view=view)
    return paginator.get_paginated_response(serializer(page, many=True).data)


class WritesOut(serializers.Serializer):
    succeeded = serializers.IntegerField()
    rejected = serializers.IntegerField()
    failed = serializers.IntegerField()
    unknown = serializers.IntegerField()


class RunOut(serializers.ModelSerializer):
    run_id = serializers.CharField(source="id")
    owner = serializers.CharField(source="owner.username", default=None)
    # What the run's writes came to (null: a run from before they were counted), and the flag
    # of a completed run with a write that did not take effect (runs.domain.writes).
    writes = WritesOut(allow_null=True, read_only=True)
    outcome_flag = serializers.ChoiceField(
        choices=list(OUTCOME_FLAGS), allow_null=True, read_only=True
    )

    class Meta:
        model = m.Run
        fields = [
            "run_id", "subject", "goal", "owner", "status", "version", "step", "max_steps",
            "tool_calls", "max_tool_calls", "max_repeated_proposal", "deadline_ms",
            "max_tokens", "tokens_used", "stop_reason", "writes", "outcome_flag", "answer",
            "citations", "pending_confirmation_id", "budgets", "tool_policy",
            "created_at", "updated_at",
        ]  # fmt: skip


class GrantIn(StrictSerializer):
    capability = serializers.CharField(max_length=64)
    resource_scope = serializers.CharField(max_length=512)
    expires_at_step = serializers.IntegerField(min_value=0, max_value=10_000)
    max_calls = serializers.IntegerField(min_value=1, required=False)
    constraints = serializers.DictField(required=False)


class BudgetsIn(StrictSerializer):
    max_steps = serializers.IntegerField(min_value=1, max_value=MAX_STEPS_CEILING, required=False)
    max_tool_calls = serializers.IntegerField(
        min_value=0, max_value=MAX_STEPS_CEILING, required=False
    )
    max_repeated_proposal = serializers.IntegerField(
        min_value=1, max_value=MAX_REPEATED_PROPOSAL_CEILING, required=False
    )
    deadline_ms = serializers.IntegerField(min_value=1, max_value=MAX_DEADLINE_MS, required=False)
    max_tokens = serializers.IntegerField(min_value=1, max_value=MAX_TOKENS_CEILING, required=False)


class PlannerIn(StrictSerializer):
    """A fixture planner (``outputs``) or a model planner (``endpoint``, optional ``model``)."""

    kind = serializers.ChoiceField(choices=["fixture", model_planning.PLANNER_KIND])
    outputs = serializers.ListField(
        child=serializers.JSONField(), max_length=10_000, required=False
    )
    endpoint = serializers.CharField(max_length=64, required=False)
    model = serializers.CharField(max_length=model_planning.MAX_MODEL_NAME, required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["kind"] == "fixture":
            if "outputs" not in attrs:
                raise serializers.ValidationError({"outputs": ["A fixture planner needs outputs."]})
            extra = sorted(set(attrs) - {"kind", "outputs"})
            if extra:
                raise serializers.ValidationError({extra[0]: ["Not for a fixture planner."]})
            return attrs
        # PLANNER_CONFIG_INVALID / PLANNER_ENDPOINT_UNKNOWN, 400, through the one handler.
        model_planning.check_config(attrs, endpoints=wiring.model_endpoints())
        return attrs


class RunCreateIn(StrictSerializer):
    goal = serializers.CharField(max_length=4000)
    subject = serializers.CharField(max_length=128, required=False)
    budgets = BudgetsIn(required=False)
    grants = GrantIn(many=True, required=False)
    planner = PlannerIn(required=False)
    # A run profile (name or id) the caller may use: it brings planner, budgets and grants.
    profile = serializers.CharField(max_length=63, required=False)


class LimitReached(Throttled):
    """A limit that waiting lifts (today's step quota, the creation rate): 429 with Retry-After
    and the limit's own code, through the API's one exception handler."""

    def __init__(self, exc: LimitError) -> None:
        super().__init__(wait=exc.retry_after_s, detail=exc.message)
        self.default_code = exc.code.lower()


class RunListCreate(APIView):
    # The creation rate (AGENTCONSOLE_RUN_CREATE_RATE) is counted in services.run_create, for
    # this view and the console's /runs/new/ alike (runs/start/limits.py).

    @extend_schema(
        parameters=[
            OpenApiParameter("status", str),
            OpenApiParameter("subject", str),
            OpenApiParameter("created_after", str, description="ISO 8601"),
            OpenApiParameter("created_before", str, description="ISO 8601"),
            OpenApiParameter(
                "tool",
                str,
                description="runs that called this tool (a ledger entry) or asked a person "
                "to confirm a proposal of it",
            ),
            OpenApiParameter("stop_reason", str, description="e.g. MAX_STEPS_REACHED"),
            OpenApiParameter(
                "outcome_flag",
                str,
                enum=list(OUTCOME_FLAGS),
                description="writes_not_applied: completed runs with a write that did not "
                "take effect (rejected, failed or unknown)",
            ),
        ],
        responses=RunOut(many=True),
    )
    def get(self, request: Request) -> Response:
        # The list never shows the planner script, the loop guard or fault plans: don't load them.
        qs = (
            selectors.runs_visible(user=request.user)
            .select_related("owner")
            .defer("planner", "loop_guard", "faults", "pending_proposal")
        )
        params = _Filters(data=request.query_params)
        params.is_valid(raise_exception=True)
        f = params.validated_data
        if f.get("status"):
            qs = qs.filter(status=f["status"])
        if f.get("subject"):
            qs = qs.filter(subject=f["subject"])
        if f.get("outcome_flag"):
            qs = selectors.runs_flagged(qs)
        qs = selectors.runs_filtered(
            qs,
            created_from=f.get("created_after"),
            created_before=f.get("created_before"),
            tool=f.get("tool", ""),
            stop_reason=f.get("stop_reason", ""),
        )
        return _page(self, request, qs, RunOut)

    @extend_schema(request=RunCreateIn, responses={201: RunOut})
    def post(self, request: Request) -> Response:
        data = validated(RunCreateIn, request.data)
        subject = data.get("subject") or request.user.get_username()
        if subject != request.user.get_username() and not is_admin(request.user):
            raise PermissionDenied("only an admin starts runs for another subject")
        try:
            if "profile" in data:
                state = profile_apis.run_start(
                    request=request, data=data, subject=subject, ctx=wiring.context()
                )
            else:
                state = _run_create(request, data, subject)
        except LimitError as exc:
            if exc.retry_after_s:
                raise LimitReached(exc) from None
            raise  # the other limits leave as domain errors: code, status, extra
        except ValueError as exc:  # pydantic: a grant constraint of the wrong shape, etc.
            raise serializers.ValidationError({"grants": [str(exc)[:500]]}) from None
        run = m.Run.objects.select_related("owner").get(pk=state.run_id)
        return Response(RunOut(run).data, status=status.HTTP_201_CREATED)


def _run_create(request: Request, data: dict[str, Any], subject: str) -> Any:
    if "planner" not in data:
        raise serializers.ValidationError({"planner": ["required unless a profile is named"]})
    grants = [dict(g) for g in data.get("grants", [])]
    if grants and not is_operator(request.user):
        # Capabilities are trusted input: a user cannot grant their own run anything.
        raise PermissionDenied("only operators and admins grant capabilities")
    return services.run_create(
        subject=subject,
        goal=data["goal"],
        budgets=RunBudgets(**data.get("budgets", {})),
        grants=grants,
        planner=dict(data["planner"]),
        owner=request.user,
        granted_by=request.user if grants else None,
        enqueue=True,
        ctx=wiring.context(),
    )


class _Filters(serializers.Serializer):
    status = serializers.ChoiceField(choices=[s.value for s in Status], required=False)
    subject = serializers.CharField(max_length=128, required=False)
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)
    outcome_flag = serializers.ChoiceField(choices=list(OUTCOME_FLAGS), required=False)
    tool = serializers.CharField(max_length=128, required=False)
    # A code as the runtime writes them; a plugin's planner may name its own.
    stop_reason = serializers.RegexField(r"^[A-Z][A-Z0-9_]{0,63}$", required=False)
    cursor = serializers.CharField(required=False)
    page_size = serializers.IntegerField(min_value=1, max_value=MAX_PAGE, required=False)


class RunDetail(APIView):
    @extend_schema(responses=RunOut)
    def get(self, request: Request, run_id: str) -> Response:
        return Response(RunOut(selectors.access_run(user=request.user, run_id=run_id)).data)


class CancelIn(StrictSerializer):
    reason = serializers.CharField(max_length=256)


class RunCancel(APIView):
    @extend_schema(request=CancelIn, responses=RunOut)
    def post(self, request: Request, run_id: str) -> Response:
        run = selectors.access_run(user=request.user, run_id=run_id)
        if not selectors.may_act_on_run(user=request.user, run=run):
            raise PermissionDenied("only the run's owner or an operator cancels it")
        data = validated(CancelIn, request.data)
        services.run_cancel(
            run_id=run.pk,
            by=request.user,
            reason=data["reason"],
            enqueue=True,
            ctx=wiring.context(),
        )
        return Response(RunOut(m.Run.objects.get(pk=run.pk)).data)


class EventOut(serializers.ModelSerializer):
    # The run page's own words for the event (runs.domain.console.timeline), as a live frame has
    # them.
    summary = serializers.SerializerMethodField()
    tone = serializers.SerializerMethodField()

    class Meta:
        model = m.TraceEvent
        fields = ["sequence", "event", "proposal_id", "details", "created_at", "summary", "tone"]

    def _said(self, row: m.TraceEvent) -> dict[str, str]:
        return timeline.said({"sequence": row.sequence, "event": row.event, "details": row.details})

    def get_summary(self, row: m.TraceEvent) -> str:
        return self._said(row)["summary"]

    def get_tone(self, row: m.TraceEvent) -> str:
        return self._said(row)["tone"]


class AfterQuery(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, required=False, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE, required=False, default=100)


class RunEvents(APIView):
    """Keyset pagination on the sequence: ``?after=<sequence>``; ``next_after`` continues."""

    @extend_schema(
        parameters=[OpenApiParameter("after", int), OpenApiParameter("limit", int)],
        responses=inline_serializer(
            "EventPage",
            {
                "results": EventOut(many=True),
                "next_after": serializers.IntegerField(allow_null=True),
            },
        ),
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = selectors.access_run(user=request.user, run_id=run_id)
        q = validated(AfterQuery, request.query_params)
        rows = list(
            m.TraceEvent.objects.filter(run=run, sequence__gt=q["after"]).order_by("sequence")[
                : q["limit"]
            ]
        )
        next_after = rows[-1].sequence if len(rows) == q["limit"] else None
        return Response({"results": EventOut(rows, many=True).data, "next_after": next_after})


class ObservationOut(serializers.ModelSerializer):
    class Meta:
        model = m.Observation
        fields = ["observation_id", "kind", "trust", "step", "content", "content_hash", "citable"]


class LedgerOut(serializers.ModelSerializer):
    class Meta:
        model = m.LedgerEntry
        fields = [
            "idempotency_token", "proposal_id", "tool_name", "tool_version", "arguments_hash",
            "proposal_hash", "status", "outcome", "verification", "attempt", "step",
            "started_at", "finished_at",
        ]  # fmt: skip


def _run_list_view(model: Any, out: type, order: str) -> type[APIView]:
    class View(APIView):
        @extend_schema(responses=out(many=True))
        def get(self, request: Request, run_id: str) -> Response:
            run = selectors.access_run(user=request.user, run_id=run_id)
            rows = model.objects.filter(run=run).order_by(order)[:1000]
            return Response(out(rows, many=True).data)

    View.__name__ = f"Run{model.__name__}List"
    return View


RunObservations = _run_list_view(m.Observation, ObservationOut, "id")
RunLedger = _run_list_view(m.LedgerEntry, LedgerOut, "id")


class HandoffOut(serializers.ModelSerializer):
    run_id = serializers.CharField()
    assignee = serializers.CharField(source="assignee.username", default=None)

    class Meta:
        model = m.Handoff
        fields = ["id", "run_id", "reason", "status", "bundle", "assignee", "resolution",
                  "opened_at", "claimed_at", "resolved_at"]  # fmt: skip


def _handoffs_for(user: Any) -> Any:
    if not (is_reviewer(user) or is_operator(user)):
        raise PermissionDenied("handoffs are for reviewers")
    return m.Handoff.objects.select_related("assignee")


class HandoffList(APIView):
    @extend_schema(parameters=[OpenApiParameter("status", str)], responses=HandoffOut(many=True))
    def get(self, request: Request) -> Response:
        qs = _handoffs_for(request.user)
        wanted = request.query_params.get("status")
        if wanted:
            qs = qs.filter(status=wanted)
        return Response(HandoffOut(qs.order_by("-opened_at")[:MAX_PAGE], many=True).data)


class HandoffDetail(APIView):
    @extend_schema(responses=HandoffOut)
    def get(self, request: Request, handoff_id: int) -> Response:
        h = _handoffs_for(request.user).filter(pk=handoff_id).first()
        if h is None:
            raise NotFound("no such handoff")
        return Response(HandoffOut(h).data)


def _reviewer(request: Request) -> None:
    if not is_reviewer(request.user):
        raise PermissionDenied("only reviewers claim and resolve handoffs")


class HandoffClaim(APIView):
    @extend_schema(request=None, responses=HandoffOut)
    def post(self, request: Request, handoff_id: int) -> Response:
        _reviewer(request)
        validated(StrictSerializer, request.data or {})
        return Response(
            HandoffOut(
                handoffs.handoff_claim(handoff_id=handoff_id, by=request.user, ctx=wiring.context())
            ).data
        )


class ResolveIn(StrictSerializer):
    action = serializers.ChoiceField(choices=list(handoffs.ACTIONS))
    reason = serializers.CharField(max_length=256)


class HandoffResolve(APIView):
    @extend_schema(request=ResolveIn, responses=HandoffOut)
    def post(self, request: Request, handoff_id: int) -> Response:
        _reviewer(request)
        data = validated(ResolveIn, request.data)
        resolved = handoffs.handoff_resolve(
            handoff_id=handoff_id,
            by=request.user,
            user_is_admin=is_admin(request.user),
            action=data["action"],
            reason=data["reason"],
            ctx=wiring.context(),
        )
        return Response(HandoffOut(resolved).data)


class QueueCounts(APIView):
    """Pending confirmations and open handoffs (the console badge; also pushed on /ws/console/)."""

    @extend_schema(
        responses=inline_serializer(
            "QueueCounts",
            {
                "pending_confirmations": serializers.IntegerField(),
                "open_handoffs": serializers.IntegerField(),
            },
        )
    )
    def get(self, request: Request) -> Response:
        if not (is_operator(request.user) or is_reviewer(request.user)):
            raise PermissionDenied("queue counts are for operators and reviewers")
        return Response(selectors.queue_counts())
