"""HTTP API of the MCP catalog, for operators only: register a server, list servers and their
tools (with pinned/changed state), refresh a listing, accept a tool, switch a server on/off.

Thin views: input serializers, one service or selector each. Every error leaves as
``{code, message, extra}`` through ``agentconsole.kernel.http.exception_handler``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentconsole import wiring
from agentconsole.kernel.http import StrictSerializer, validated
from agentconsole.kernel.roles import is_operator
from policy.mcp import selectors as mcp_selectors
from policy.mcp import services as mcp_services


def _operator(request: Request) -> None:
    if not is_operator(request.user):
        raise PermissionDenied("only operators manage MCP servers")


class ServerIn(StrictSerializer):
    # The spec itself is checked by McpServerSpec (policy.domain.mcp_tools.mcp): one set of rules
    # for the API, the command and the console.
    name = serializers.CharField(max_length=32)
    transport = serializers.ChoiceField(choices=["stdio", "http"])
    command = serializers.CharField(max_length=512, required=False)
    args = serializers.ListField(child=serializers.CharField(max_length=1024), required=False)
    env_secrets = serializers.DictField(child=serializers.CharField(max_length=64), required=False)
    url = serializers.CharField(max_length=2048, required=False)
    header_secrets = serializers.DictField(
        child=serializers.CharField(max_length=64), required=False
    )


class AcceptIn(StrictSerializer):
    listed_pin = serializers.RegexField(r"^[0-9a-f]{64}$")
    policy = serializers.DictField()


class EnabledIn(StrictSerializer):
    enabled = serializers.BooleanField()


def _server_out(name: str) -> dict[str, Any]:
    return mcp_selectors.mcp_server_view(mcp_selectors.mcp_server_get(name=name))


def _listed_out(listed: mcp_services.Listed) -> dict[str, Any]:
    """The server, and the entries of its listing that were refused (not offered), with why."""
    refused = [asdict(r) for r in listed.refused]
    return {**mcp_selectors.mcp_server_view(listed.server), "refused": refused}


class McpServerList(APIView):
    # Named: drf-spectacular would call both GETs "mcp_servers_retrieve" (a deploy-check warning).
    @extend_schema(operation_id="mcp_servers_list", responses={200: dict})
    def get(self, request: Request) -> Response:
        _operator(request)
        return Response(mcp_selectors.mcp_servers())

    @extend_schema(request=ServerIn, responses={201: dict})
    def post(self, request: Request) -> Response:
        _operator(request)
        spec = validated(ServerIn, request.data)
        listed = mcp_services.mcp_server_register(
            spec=dict(spec),
            by=request.user,
            lister=wiring.mcp_lister,
            allowed_commands=settings.AGENTCONSOLE_MCP_STDIO_COMMANDS,
        )
        return Response(_listed_out(listed), status=201)


class McpServerDetail(APIView):
    @extend_schema(responses={200: dict})
    def get(self, request: Request, name: str) -> Response:
        _operator(request)
        return Response(_server_out(name))


class McpServerRefresh(APIView):
    @extend_schema(request=None, responses={200: dict})
    def post(self, request: Request, name: str) -> Response:
        _operator(request)
        listed = mcp_services.mcp_server_refresh(
            name=name,
            lister=wiring.mcp_lister,
            allowed_commands=settings.AGENTCONSOLE_MCP_STDIO_COMMANDS,
        )
        return Response(_listed_out(listed))


class McpServerEnabled(APIView):
    @extend_schema(request=EnabledIn, responses={200: dict})
    def post(self, request: Request, name: str) -> Response:
        _operator(request)
        data = validated(EnabledIn, request.data)
        mcp_services.mcp_server_set_enabled(name=name, enabled=data["enabled"])
        return Response(_server_out(name))


class McpToolAccept(APIView):
    @extend_schema(request=AcceptIn, responses={200: dict})
    def post(self, request: Request, name: str, tool: str) -> Response:
        _operator(request)
        data = validated(AcceptIn, request.data)
        mcp_services.mcp_tool_accept(
            server=name,
            tool=tool,
            policy=data["policy"],
            shown_pin=data["listed_pin"],
            by=request.user,
        )
        return Response(_server_out(name))
