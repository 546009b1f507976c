"""python manage.py mcp … — the operator's MCP catalog from a shell (the same services as the
API at /api/mcp/servers/).

    mcp register SPEC.json              register a server (spec: see README "MCP tools")
    mcp list [--json]                   servers, their tools, pinned/changed state
    mcp refresh SERVER                  list the server's tools again
    mcp accept SERVER TOOL POLICY.json  accept the tool as listed now, under POLICY
    mcp enable SERVER / mcp disable SERVER

``accept`` accepts the listing shown by the last ``list``/``refresh`` (its pin): if the server
changed it since, MCP_TOOL_CHANGED and nothing is written. ``--pin`` names the pin you reviewed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentconsole import wiring
from policy.domain import strict_json
from policy.domain.errors import DomainError
from policy.domain.mcp_tools.mcp_listing import RefusedTool
from policy.domain.strict_json import JsonRefused
from policy.mcp import selectors, services
from policy.models import McpTool


def _json_file(path: str) -> dict[str, Any]:
    try:
        value = strict_json.loads(Path(path).read_bytes())
    except OSError as exc:
        raise CommandError(f"{path}: {exc}") from None
    except JsonRefused as exc:
        raise CommandError(f"{path}: {exc.code}: {exc.message}") from None
    if not isinstance(value, dict):
        raise CommandError(f"{path}: must hold a JSON object")
    return value


class Command(BaseCommand):
    help = "Register MCP servers, list and accept their tools (operator)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        register = sub.add_parser("register")
        register.add_argument("spec")
        listing = sub.add_parser("list")
        listing.add_argument("--json", action="store_true")
        sub.add_parser("refresh").add_argument("server")
        accept = sub.add_parser("accept")
        accept.add_argument("server")
        accept.add_argument("tool")
        accept.add_argument("policy")
        accept.add_argument("--pin", help="the listed pin you reviewed (default: the current)")
        sub.add_parser("enable").add_argument("server")
        sub.add_parser("disable").add_argument("server")
        for p in (register, accept):
            p.add_argument("--by", help="the operator's user name (recorded)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self._handle(options)
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None

    def _handle(self, options: dict[str, Any]) -> None:
        action = options["action"]
        by = self._user(options.get("by"))
        if action == "register":
            listed = services.mcp_server_register(
                spec=_json_file(options["spec"]),
                by=by,
                lister=wiring.mcp_lister,
                allowed_commands=settings.AGENTCONSOLE_MCP_STDIO_COMMANDS,
            )
            self._show(selectors.mcp_server_view(listed.server), listed.refused)
        elif action == "list":
            servers = selectors.mcp_servers()
            if options["json"]:
                self.stdout.write(json.dumps(servers, default=str, indent=2))
            for view in servers if not options["json"] else ():
                self._show(view)
        elif action == "refresh":
            listed = services.mcp_server_refresh(
                name=options["server"],
                lister=wiring.mcp_lister,
                allowed_commands=settings.AGENTCONSOLE_MCP_STDIO_COMMANDS,
            )
            self._show(selectors.mcp_server_view(listed.server), listed.refused)
        elif action == "accept":
            pin = options["pin"] or self._listed_pin(options["server"], options["tool"])
            row = services.mcp_tool_accept(
                server=options["server"],
                tool=options["tool"],
                policy=_json_file(options["policy"]),
                shown_pin=pin,
                by=by,
            )
            self.stdout.write(f"accepted {row.name} as version {row.revision} (pin {pin[:12]})")
        else:
            switched = services.mcp_server_set_enabled(
                name=options["server"], enabled=action == "enable"
            )
            self.stdout.write(f"{switched.name}: {'enabled' if switched.enabled else 'disabled'}")

    def _listed_pin(self, server: str, tool: str) -> str:
        row = McpTool.objects.filter(server__name=server, name=tool).first()
        return row.listed_pin if row is not None else ""

    def _user(self, name: str | None) -> Any:
        if not name:
            return None
        user = get_user_model().objects.filter(username=name).first()
        if user is None:
            raise CommandError(f"no user {name!r}")
        return user

    def _show(self, server: dict[str, Any], refused: tuple[RefusedTool, ...] = ()) -> None:
        state = "enabled" if server["enabled"] else "disabled"
        self.stdout.write(f"{server['name']} ({server['transport']}, {state})")
        for tool in server["tools"]:
            effective = tool.get("effective") or {}
            self.stdout.write(
                f"  {tool['name']:<24} {tool['state']:<9} v{tool['version'] or '-':<3} "
                f"pin {str(tool['listed_pin'])[:12]}  "
                f"{effective.get('side_effect', '')} {effective.get('confirmation', '')}"
            )
        for r in refused:
            self.stdout.write(f"  refused {r.name or '-'}: {r.code} ({r.reason or r.message})")
