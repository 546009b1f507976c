"""HTTP API of run profiles: what the caller may start (``GET /api/profiles/``), and starting a
run from one (``POST /api/runs/`` with ``profile``; the view is ``runs.apis.RunListCreate``).

Thin: the rules are ``runs.domain.profiles``, the reads and writes ``runs.start.profiles``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from policy.domain.errors import DomainError
from runs.context import RunsContext
from runs.domain.state import RunState
from runs.models import RunProfile
from runs.start import profiles

# What a run from a profile may not add: the profile is the whole definition.
EXCLUSIVE = ("grants", "planner", "budgets")


class ProfileExclusive(DomainError):
    code = "PROFILE_EXCLUSIVE"


class ProfileOut(serializers.ModelSerializer):
    planner = serializers.SerializerMethodField()

    class Meta:
        model = RunProfile
        fields = ["id", "name", "description", "planner", "tools", "grant_templates", "budgets",
                  "tool_policy", "version"]  # fmt: skip

    def to_representation(self, instance: RunProfile) -> Any:
        # Secrets masked: a profile saved before the scanner ran on profiles may hold them.
        return super().to_representation(profiles.profile_shown(instance))

    def get_planner(self, obj: RunProfile) -> str:
        # The kind only: a fixture planner's script is the operator's configuration.
        return str(obj.planner.get("kind", ""))


class ProfileList(APIView):
    @extend_schema(responses=ProfileOut(many=True))
    def get(self, request: Request) -> Response:
        rows = profiles.profiles_usable_by(user=request.user).order_by("name")[:200]
        return Response(ProfileOut(rows, many=True).data)


def run_start(
    *, request: Request, data: dict[str, Any], subject: str, ctx: RunsContext
) -> RunState:
    """``POST /api/runs/`` naming a profile: exactly the profile's grants, planner and budgets.

    Called by ``runs.apis.RunListCreate`` (the entry point, which hands down ``ctx``)."""
    extra = [name for name in EXCLUSIVE if name in data]
    if extra:
        raise ProfileExclusive(
            f"a run from a profile takes no {extra[0]}: the profile defines them", field=extra[0]
        )
    return profiles.run_from_profile(
        user=request.user,
        ref=data["profile"],
        goal=data["goal"],
        subject=subject,
        ctx=ctx,
    )
