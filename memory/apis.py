"""HTTP API of a user's own long-term memory: thin views over memory.services.

The subject is the requesting user's username; an admin may name another with ``?subject=``.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentconsole import wiring
from agentconsole.kernel.http import StrictSerializer, validated
from agentconsole.kernel.roles import is_admin
from memory import services
from memory.models import MAX_VERSION, PreferenceChange, PreferenceRecord

SUBJECT = OpenApiParameter("subject", str, description="admins only: another user's memory")


def _subject(request: Request) -> str:
    asked = request.query_params.get("subject")
    if asked and asked != request.user.get_username():
        if not is_admin(request.user):
            raise services.ScopeNotOwned("this memory belongs to another subject")
        return asked
    return request.user.get_username()


class PreferenceOut(serializers.ModelSerializer):
    revoked_by = serializers.CharField(source="revoked_by.username", default=None)

    class Meta:
        model = PreferenceRecord
        fields = [
            "key", "value", "version", "source_kind", "confirmation_id", "created_by_run",
            "expires_at", "revoked_at", "revoked_by", "revoke_reason", "updated_at",
        ]  # fmt: skip


class ChangeOut(serializers.ModelSerializer):
    change_id = serializers.IntegerField(source="id")

    class Meta:
        model = PreferenceChange
        fields = ["change_id", "subject", "key", "proposed_value", "expected_version",
                  "proposal_hash", "status", "result", "created_at", "expires_at"]  # fmt: skip


class PreferenceList(APIView):
    @extend_schema(parameters=[SUBJECT], responses=PreferenceOut(many=True))
    def get(self, request: Request) -> Response:
        rows = services.preferences_list(subject=_subject(request), by=request.user)
        return Response(PreferenceOut(rows, many=True).data)


class ChangeIn(StrictSerializer):
    key = serializers.CharField(max_length=64)
    value = serializers.CharField(max_length=512)
    expected_version = serializers.IntegerField(
        min_value=0, max_value=MAX_VERSION, required=False, allow_null=True
    )


class ChangePropose(APIView):
    """Step 1 of an edit: nothing is written; the response carries the hash to confirm."""

    @extend_schema(parameters=[SUBJECT], request=ChangeIn, responses={201: ChangeOut})
    def post(self, request: Request) -> Response:
        data = validated(ChangeIn, request.data)
        change = services.preference_propose_edit(
            subject=_subject(request),
            key=data["key"],
            value=data["value"],
            expected_version=data.get("expected_version"),
            by=request.user,
        )
        return Response(ChangeOut(change).data, status=status.HTTP_201_CREATED)


class ApplyIn(StrictSerializer):
    proposal_hash = serializers.RegexField(r"^[0-9a-f]{64}$")


class ChangeApply(APIView):
    """Step 2: confirm the exact change shown. A stale version is a 409 that carries the
    current and the proposed value."""

    @extend_schema(
        request=ApplyIn,
        responses=inline_serializer(
            "WriteResult",
            {
                "ok": serializers.BooleanField(),
                "version": serializers.IntegerField(),
                "code": serializers.CharField(allow_null=True),
                "current_value": serializers.CharField(allow_null=True),
                "proposed_value": serializers.CharField(allow_null=True),
            },
        ),
    )
    def post(self, request: Request, change_id: int) -> Response:
        data = validated(ApplyIn, request.data)
        result = services.preference_apply_edit(
            change_id=change_id, shown_hash=data["proposal_hash"], by=request.user
        )
        if not result.ok:
            body = {
                "code": result.code,
                "message": "the preference changed since it was read",
                "extra": result.as_dict(),
            }
            return Response(body, status=status.HTTP_409_CONFLICT)
        return Response(result.as_dict())


class RevokeIn(StrictSerializer):
    reason = serializers.CharField(max_length=256)


class PreferenceRevoke(APIView):
    @extend_schema(parameters=[SUBJECT], request=RevokeIn, responses=PreferenceOut)
    def post(self, request: Request, key: str) -> Response:
        data = validated(RevokeIn, request.data)
        record = services.preference_revoke(
            subject=_subject(request), key=key, by=request.user, reason=data["reason"]
        )
        return Response(PreferenceOut(record).data)


class PreferenceHistory(APIView):
    @extend_schema(parameters=[SUBJECT, OpenApiParameter("key", str)], responses=dict)
    def get(self, request: Request) -> Response:
        rows = services.preference_history(
            subject=_subject(request), by=request.user, key=request.query_params.get("key")
        )
        return Response(rows)


class PreferenceExport(APIView):
    @extend_schema(parameters=[SUBJECT], responses=dict)
    def get(self, request: Request) -> Response:
        return Response(services.preferences_export(subject=_subject(request), by=request.user))


class EraseIn(StrictSerializer):
    confirm = serializers.BooleanField()

    def validate_confirm(self, value: bool) -> bool:
        if value is not True:
            raise serializers.ValidationError("set confirm to true to erase")
        return value


class PreferenceErase(APIView):
    @extend_schema(
        parameters=[SUBJECT],
        request=EraseIn,
        responses=inline_serializer("Erased", {"erased": serializers.IntegerField()}),
    )
    def post(self, request: Request) -> Response:
        validated(EraseIn, request.data)
        return Response(
            {
                "erased": services.preferences_erase(
                    subject=_subject(request), by=request.user, ctx=wiring.context()
                )
            }
        )
