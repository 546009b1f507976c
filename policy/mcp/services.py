"""Writes of the MCP catalog: register a server, refresh its listing, accept a tool, switch a
server on or off. Each write sets the server's ``updated_at``, which the registry reads as its
cache key (``agentconsole.wiring``), so an acceptance reaches the next run step built after it.

The listing is I/O (a process or an HTTP session); it happens before the transaction opens,
and the rows are written in one transaction after it, or not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic import ValidationError

from policy.domain.errors import NotFound, RegistryError
from policy.domain.mcp_tools.mcp import (
    AcceptedTool,
    McpError,
    McpServerSpec,
    McpToolPolicy,
    mcp_contract,
)
from policy.domain.mcp_tools.mcp_listing import RefusedTool, screen
from policy.domain.mcp_tools.mcp_stdio import stdio_refusal
from policy.domain.outcomes import ToolOutcome
from policy.domain.registry import RegisteredTool
from policy.models import McpServer, McpTool

# Lists a server's tools (``policy.mcp.client.list_tools`` with the secrets bound).
Lister = Callable[[McpServerSpec], list[dict[str, Any]]]

MAX_TOOLS = 200  # tools kept from one listing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listed:
    """A server as registered or refreshed, and the entries of its listing that were refused
    (``policy.domain.mcp_tools.mcp_listing``): the API and the command show them."""

    server: McpServer
    refused: tuple[RefusedTool, ...]


class McpConflict(McpError):
    http_status = 409


def command_allowed(spec: McpServerSpec, allowed: Sequence[Sequence[str]]) -> None:
    """A stdio server is a process the worker starts: an operator picks among the whole command
    lines the deployment allows (``AGENTCONSOLE_MCP_STDIO_COMMANDS``), else registering a server
    would be running any program on the workers' hosts (policy/domain/mcp_tools/mcp_stdio.py)."""
    if spec.transport != "stdio":
        return
    refusal = stdio_refusal(spec.command, spec.args, spec.env_secrets, allowed)
    if refusal is not None:
        raise McpError(refusal, code="MCP_COMMAND_NOT_ALLOWED")


def _invalid(code: str, exc: ValidationError) -> McpError:
    # include_input=False: a refused value may be a secret pasted in the wrong field.
    errors = [
        {"loc": ".".join(map(str, e["loc"])), "msg": e["msg"]}
        for e in exc.errors(include_url=False, include_input=False)
    ]
    return McpError("invalid MCP configuration", code=code, errors=errors)


def mcp_server_register(
    *, spec: dict[str, Any], by: Any, lister: Lister, allowed_commands: Sequence[Sequence[str]]
) -> Listed:
    """Register a server and record its tools (none accepted yet). Refused with
    MCP_COMMAND_NOT_ALLOWED for a stdio command the deployment does not allow,
    MCP_SERVER_EXISTS for a taken name, MCP_SERVER_UNAVAILABLE when it cannot be listed,
    MCP_RESPONSE_REFUSED when its listing is JSON we refuse (a key twice...)."""
    try:
        parsed = McpServerSpec.model_validate(spec)
    except ValidationError as exc:
        raise _invalid("MCP_SERVER_INVALID", exc) from None
    command_allowed(parsed, allowed_commands)
    if McpServer.objects.filter(name=parsed.name).exists():
        raise McpConflict("a server of that name exists", code="MCP_SERVER_EXISTS")
    listing = lister(parsed)  # I/O, outside any transaction
    now = timezone.now()
    try:
        with transaction.atomic():
            server = McpServer.objects.create(
                name=parsed.name,
                transport=parsed.transport,
                spec=parsed.model_dump(mode="json"),
                created_by=by if getattr(by, "pk", None) else None,
                listed_at=now,
                updated_at=now,
            )
            refused = _record_listing(server, listing)
    except IntegrityError:
        # The race: two registrations of one name, both past the exists() check.
        raise McpConflict("a server of that name exists", code="MCP_SERVER_EXISTS") from None
    return Listed(server, refused)


def mcp_server_refresh(
    *, name: str, lister: Lister, allowed_commands: Sequence[Sequence[str]]
) -> Listed:
    """List the server's tools again. A tool listed differently from what was accepted is
    ``changed`` from now on (refused at the gate until accepted again); one no longer listed
    is ``gone``."""
    server = _server(name)
    spec = McpServerSpec.model_validate(server.spec)
    command_allowed(spec, allowed_commands)
    listing = lister(spec)
    with transaction.atomic():
        server = McpServer.objects.select_for_update().get(pk=server.pk)
        refused = _record_listing(server, listing)
        server.listed_at = server.updated_at = timezone.now()
        server.save(update_fields=["listed_at", "updated_at"])
    return Listed(server, refused)


def _record_listing(server: McpServer, listing: list[dict[str, Any]]) -> tuple[RefusedTool, ...]:
    """Record the entries ``screen`` keeps; the refused ones are never offered (a row listed
    before and refused now is no longer listed: a call is refused as changed). Each refusal
    is logged and handed back to the caller, who shows it."""
    screened = screen(listing, limit=MAX_TOOLS)
    for refused in screened.refused:
        log.warning("mcp server %s: tool %s refused: %s %s", server.name, refused.name,
                    refused.code, refused.reason or "")  # fmt: skip
    rows = {row.name: row for row in McpTool.objects.filter(server=server)}
    for name, (entry, listed_pin) in screened.tools.items():
        row = rows.pop(name, None)
        if row is None:
            McpTool.objects.create(server=server, name=name, listing=entry, listed_pin=listed_pin)
        elif row.listed_pin != listed_pin or row.listing is None:
            row.listing, row.listed_pin = entry, listed_pin
            row.save(update_fields=["listing", "listed_pin"])
    for row in rows.values():
        if row.listing is not None:
            row.listing, row.listed_pin = None, ""
            row.save(update_fields=["listing", "listed_pin"])
    return screened.refused


def mcp_tool_accept(
    *, server: str, tool: str, policy: dict[str, Any], shown_pin: str, by: Any
) -> McpTool:
    """Accept the listing of ``tool`` the operator was shown (``shown_pin``), under ``policy``.

    1. The policy must parse and, with the listing, make a contract the registry takes (the
       tightened schema compiles, the resource field is an input): else MCP_POLICY_INVALID.
    2. Compare-and-set on the listed pin: if the server's listing changed since the operator
       looked (a refresh in between), MCP_TOOL_CHANGED and nothing is written.
    3. A listing different from the one accepted before gets the next revision, which is the
       contract's version: confirmations and tokens of the old tool cannot cover the new one.
    """
    try:
        parsed = McpToolPolicy.model_validate(policy)
    except ValidationError as exc:
        raise _invalid("MCP_POLICY_INVALID", exc) from None
    row = McpTool.objects.select_related("server").filter(server__name=server, name=tool).first()
    if row is None:
        raise NotFound("no such MCP tool", server=server[:64], tool=tool[:64])
    if row.listing is None:
        raise McpConflict("the server no longer lists this tool", code="MCP_TOOL_NOT_LISTED")
    if row.listed_pin != shown_pin:
        raise McpConflict(_CHANGED, code="MCP_TOOL_CHANGED", listed_pin=row.listed_pin)
    revision = row.revision if row.accepted_pin == row.listed_pin else row.revision + 1
    _check_contract(row, parsed, revision)
    now = timezone.now()
    with transaction.atomic():
        n = McpTool.objects.filter(pk=row.pk, listed_pin=shown_pin, revision=row.revision).update(
            accepted_listing=row.listing,
            accepted_pin=shown_pin,
            policy=parsed.model_dump(mode="json", exclude_none=True),
            revision=revision,
            accepted_by=by if getattr(by, "pk", None) else None,
            accepted_at=now,
        )
        if n != 1:
            # The race: a refresh (or another acceptance) landed between the read and here.
            raise McpConflict(_CHANGED, code="MCP_TOOL_CHANGED")
        McpServer.objects.filter(pk=row.server_id).update(updated_at=now)
    row.refresh_from_db()
    return row


_CHANGED = "the tool's listing changed since it was shown: review it again"


def _check_contract(row: McpTool, policy: McpToolPolicy, revision: int) -> None:
    def never(server: McpServerSpec, **kwargs: Any) -> ToolOutcome:  # pragma: no cover
        raise AssertionError("a dry-run contract is never executed")

    accepted = AcceptedTool(
        server=McpServerSpec.model_validate(row.server.spec),
        listing=row.listing or {},
        policy=policy,
        revision=max(revision, 1),
        accepted_pin=row.listed_pin,
        listed_pin=row.listed_pin,
    )
    try:
        RegisteredTool(mcp_contract(accepted, call=never))
    except RegistryError as exc:
        raise McpError(exc.message, code="MCP_POLICY_INVALID") from None


def mcp_server_set_enabled(*, name: str, enabled: bool) -> McpServer:
    """Switch a server off (its tools leave the registry) or on again."""
    n = McpServer.objects.filter(name=name).update(enabled=enabled, updated_at=timezone.now())
    if n != 1:
        raise NotFound("no such MCP server", server=name[:64])
    return _server(name)


def _server(name: str) -> McpServer:
    server = McpServer.objects.filter(name=name).first()
    if server is None:
        raise NotFound("no such MCP server", server=name[:64])
    return server
