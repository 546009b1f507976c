"""Console page of the MCP catalog (operators): servers, their tools with pinned/changed state,
and an Accept form per tool. Thin: the same selector and service as the API; anyone who is not
an operator gets a 404 (the page's existence is not disclosed)."""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_GET, require_POST

from agentconsole.kernel.pages import page_error, pretty_json, role_required
from agentconsole.kernel.roles import is_operator
from agentconsole.kernel.status import domain_status
from policy.domain.contracts import ConfirmationMode, SideEffect
from policy.domain.errors import DomainError, NotFound
from policy.domain.mcp_tools.mcp import MAX_TIMEOUT_MS
from policy.domain.mcp_tools.mcp_listing import tool_name_ok
from policy.mcp import selectors, services

PAGE = "console/tools/list.html"


class AcceptForm(forms.Form):
    listed_pin = forms.RegexField(r"^[0-9a-f]{64}$")
    capability = forms.CharField(max_length=65)
    side_effect = forms.ChoiceField(choices=[(e.value, e.value) for e in SideEffect])
    confirmation = forms.ChoiceField(choices=[(c.value, c.value) for c in ConfirmationMode])
    timeout_ms = forms.IntegerField(min_value=100, max_value=MAX_TIMEOUT_MS, initial=10_000)


def _page(request: HttpRequest, *, error: DomainError | None = None) -> HttpResponse:
    status = domain_status(error) if error is not None else 200
    servers = selectors.mcp_servers()
    for server in servers:
        spec = server["spec"]
        # A stdio server's whole command line, written as AGENTCONSOLE_MCP_STDIO_COMMANDS writes
        # it (an argv list), so the operator sees exactly what the allowlist must name.
        argv = [spec.get("command"), *spec.get("args", ())]
        server["argv_json"] = json.dumps(argv, ensure_ascii=False) if spec.get("command") else ""
        for tool in server["tools"]:
            # What the operator accepts, in full: the listing and the schema the gate will use.
            tool["listing_json"] = pretty_json(tool["listing"]) if tool["listing"] else ""
            tool["schema_json"] = pretty_json(tool["input_schema"]) if tool["input_schema"] else ""
            tool["hints"] = annotation_hints((tool["listing"] or {}).get("annotations"))
            # A name stored before names were checked (policy.domain.mcp_tools.mcp_listing) has no
            # URL: it is shown, escaped, and cannot be accepted (a refresh drops it).
            ok = tool_name_ok(tool["name"])
            tool["accept_url"] = (
                reverse("mcp-tool-accept", args=[server["name"], tool["name"]]) if ok else ""
            )
    context = {
        "servers": servers,
        "error": error,
        "side_effects": [e.value for e in SideEffect],
        "confirmations": [c.value for c in ConfirmationMode],
    }
    return render(request, PAGE, context, status=status)


HINTS = {
    "readOnlyHint": "read-only",
    "destructiveHint": "destructive",
    "idempotentHint": "idempotent",
    "openWorldHint": "open world",
}


def annotation_hints(annotations: object) -> list[str]:
    """The server's own hints, named for the operator choosing a policy (they only tighten it)."""
    if not isinstance(annotations, dict):
        return []
    return [f"server says {label}" for key, label in HINTS.items() if annotations.get(key) is True]


@require_GET
@role_required(is_operator)
def tools(request: HttpRequest) -> HttpResponse:
    return _page(request)


@require_POST
@role_required(is_operator)
def accept(request: HttpRequest, server: str, tool: str) -> HttpResponse:
    form = AcceptForm(request.POST)
    if not form.is_valid():
        field = next(iter(form.errors))
        return page_error(request, "MCP_POLICY_INVALID", f"The form is not valid ({field}).", 400)
    data = dict(form.cleaned_data)
    shown_pin = data.pop("listed_pin")
    try:
        row = services.mcp_tool_accept(
            server=server, tool=tool, policy=data, shown_pin=shown_pin, by=request.user
        )
    except NotFound as exc:
        return page_error(request, exc)
    except DomainError as exc:
        return _page(request, error=exc)
    messages.success(request, f"Accepted {server}/{tool} as version {row.revision}.")
    return redirect("mcp-tools")


urlpatterns: list[URLPattern] = [
    path("tools/", tools, name="mcp-tools"),
    path("tools/<str:server>/<str:tool>/accept/", accept, name="mcp-tool-accept"),
]
