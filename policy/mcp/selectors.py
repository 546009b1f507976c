"""Reads of the MCP catalog: the registry's cache key, the accepted tools it builds contracts
from, and the operator's view of servers and tools (API, command, console)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db.models import Count, Max

from policy.domain.contracts import ToolContract
from policy.domain.errors import DomainError, NotFound
from policy.domain.mcp_tools.mcp import (
    AcceptedTool,
    McpAsyncCall,
    McpCall,
    McpServerSpec,
    McpToolPolicy,
    contract_name,
    effective_policy,
    mcp_contract,
    tighten_schema,
)
from policy.domain.mcp_tools.mcp_stdio import stdio_refusal
from policy.models import McpServer, McpTool

log = logging.getLogger(__name__)


def mcp_catalog_stamp() -> tuple[int, Any]:
    """What changes whenever the catalog does (one small aggregate query): every service that
    writes a server or one of its tools sets the server's ``updated_at``; a deleted server
    lowers the count."""
    row = McpServer.objects.aggregate(n=Count("id"), at=Max("updated_at"))
    return (row["n"], row["at"])


def mcp_accepted_tools() -> list[AcceptedTool]:
    """The accepted tools of enabled servers, as the registry builds them."""
    rows = (
        McpTool.objects.select_related("server")
        .filter(server__enabled=True)
        .exclude(accepted_pin="")
        .order_by("server__name", "name")
    )
    return [
        AcceptedTool(
            server=McpServerSpec.model_validate(row.server.spec),
            listing=row.accepted_listing or {},
            policy=McpToolPolicy.model_validate(row.policy),
            revision=row.revision,
            accepted_pin=row.accepted_pin,
            listed_pin=row.listed_pin,
        )
        for row in rows
    ]


def mcp_contracts(
    *,
    call: McpCall,
    allowed_commands: Sequence[Sequence[str]],
    acall: McpAsyncCall | None = None,
) -> list[ToolContract]:
    """Contracts of the accepted tools. One that no longer builds (the code's rules grew
    stricter since it was accepted), or whose stdio command line the deployment no longer
    allows (an executable-only entry allowed it before), is left out and logged: one bad MCP
    tool must not stop every run's registry."""
    out = []
    for tool in mcp_accepted_tools():
        server = tool.server
        if server.transport == "stdio" and stdio_refusal(
            server.command, server.args, server.env_secrets, allowed_commands
        ):
            log.warning("mcp server %s left out: command line not allowed", server.name)
            continue
        try:
            out.append(mcp_contract(tool, call=call, acall=acall))
        except DomainError as exc:
            name = tool.listing.get("name")
            log.warning("mcp tool %s/%s left out: %s", tool.server.name, name, exc.code)
    return out


def mcp_secrets_for(
    contracts: Iterable[ToolContract], values: Mapping[str, str]
) -> dict[str, dict[str, str]]:
    """The executor's secrets of MCP contracts (by contract name): the values of the secret
    names their server spec uses, so the executor injects them and scrubs them from output."""
    return {
        c.name: {n: values[n] for n in c.secret_names if n in values}
        for c in contracts
        if c.name.startswith("mcp__")
    }


def tool_state(row: McpTool) -> str:
    """new (never accepted), accepted (listed as accepted), changed (listed otherwise: refused
    until accepted again), gone (accepted, no longer listed), unlisted (neither)."""
    if not row.accepted_pin:
        return "new" if row.listing is not None else "unlisted"
    if row.listing is None:
        return "gone"
    return "accepted" if row.listed_pin == row.accepted_pin else "changed"


def _tool_view(row: McpTool, server: str) -> dict[str, Any]:
    view: dict[str, Any] = {
        "name": row.name,
        "contract_name": contract_name(server, row.name),
        "version": str(row.revision) if row.accepted_pin else None,
        "state": tool_state(row),
        "listed_pin": row.listed_pin or None,
        "accepted_pin": row.accepted_pin or None,
        "listing": row.listing,
        "policy": row.policy,
        "accepted_by": row.accepted_by.get_username() if row.accepted_by else None,
        "accepted_at": row.accepted_at,
    }
    listing = row.listing or row.accepted_listing or {}
    try:
        view["input_schema"], view["schema_tightened_at"] = tighten_schema(
            listing.get("inputSchema")
        )
    except DomainError as exc:
        view["input_schema"], view["schema_tightened_at"] = None, [exc.code]
    if row.policy:
        effective = effective_policy(
            McpToolPolicy.model_validate(row.policy), listing.get("annotations")
        )
        view["effective"] = {
            "side_effect": effective.side_effect.value,
            "confirmation": effective.confirmation.value,
            "tightened_by_annotations": list(effective.tightened),
        }
    return view


def mcp_server_view(server: McpServer) -> dict[str, Any]:
    return {
        "name": server.name,
        "transport": server.transport,
        "spec": server.spec,  # secret names only, never values
        "enabled": server.enabled,
        "listed_at": server.listed_at,
        "updated_at": server.updated_at,
        "tools": [_tool_view(t, server.name) for t in server.tools.all()],
    }


def mcp_servers() -> list[dict[str, Any]]:
    servers = McpServer.objects.prefetch_related("tools__accepted_by").order_by("name")
    return [mcp_server_view(s) for s in servers]


def mcp_server_get(*, name: str) -> McpServer:
    server = McpServer.objects.filter(name=name).first()
    if server is None:
        raise NotFound("no such MCP server", server=name[:64])
    return server
