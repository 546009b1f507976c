"""issue 21 items 8 and 9: what an MCP server sends is data from outside. The error sweep,
extended to it: a server that names a tool ``a/b</x>``, puts a NUL in a description, lists one
name twice, nests 70 deep, names a key twice, sends NaN or a lone surrogate makes no response
a 5xx. Each bad tool is refused with its reason at registration, a listing with no one meaning
is refused whole (MCP_RESPONSE_REFUSED), and the /tools/ page shows whatever is stored,
escaped. The servers are real (tests/mcp/hostile_server.py, the official SDK).

Personas: ``operator`` registers servers and accepts tools.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import mcp.client.streamable_http as streamable_http
import mcp_types
import pytest
from django.test import Client

from policy.domain.contracts import CancelSignal, ToolContext
from policy.domain.mcp_tools.mcp import McpServerSpec, pin
from policy.domain.outcomes import OutcomeStatus
from policy.mcp.client import call_tool, list_tools
from policy.mcp.wire import StrictMessages
from policy.models import McpServer, McpTool
from tests.mcp.mcp_kit import READ_POLICY, TIMEOUT_MS, hostile_http, hostile_stdio
from tests.support.forms import crawl, submit, variants
from tests.support.personas import Persona, make_persona

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allow_hostile")]

SERVERS = "/api/mcp/servers/"
# What the "names" server lists and why each bad entry is refused
# (policy.domain.mcp_tools.mcp_listing).
REFUSED = [
    ("a/b</x>", "MCP_TOOL_NAME_UNSUPPORTED", None),
    ("..", "MCP_TOOL_NAME_UNSUPPORTED", None),
    ("lookup\\n", "MCP_TOOL_NAME_UNSUPPORTED", None),
    ("twinA", "MCP_TOOL_NAME_DUPLICATE", None),
    ("twinA", "MCP_TOOL_NAME_DUPLICATE", None),
    ("nul_desc", "MCP_TOOL_LISTING_INVALID", "NUL_CHARACTER"),
    ("deep", "MCP_TOOL_LISTING_INVALID", "VALUE_TOO_DEEP"),
]
KEPT = {"fine", "nul_text", "twin_keys"}


@pytest.fixture
def operator() -> Persona:
    return make_persona("operator", roles=("operator",))


@pytest.fixture(params=["stdio", "http"])
def names_server(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    if request.param == "stdio":
        yield hostile_stdio("names")
    else:
        yield from hostile_http("names")


def test_each_bad_tool_is_refused_with_its_reason(
    operator: Persona, names_server: dict[str, Any]
) -> None:
    """Before: the NUL in a description failed the jsonb insert (500 on PostgreSQL) and
    ``a/b</x>``, ``..`` and ``lookup\\n`` were stored and offered; the /tools/ page could not
    build a URL for ``a/b</x>`` (500)."""
    created = operator.post(SERVERS, names_server)
    assert created.status_code == 201, created.content[:300]
    body = created.json()
    refused = [(r["name"], r["code"], r["reason"]) for r in body["refused"]]
    assert sorted(refused) == sorted(REFUSED)
    assert {t["name"] for t in body["tools"]} == KEPT
    assert set(McpTool.objects.values_list("name", flat=True)) == KEPT
    refreshed = operator.post(f"{SERVERS}{names_server['name']}/refresh/")
    assert refreshed.status_code == 200
    assert len(refreshed.json()["refused"]) == len(REFUSED)


@pytest.mark.parametrize(
    ("case", "reason"),
    [("duplicate-key", "DUPLICATE_JSON_KEY"), ("nan", "NON_FINITE_NUMBER"),
     ("lone-surrogate", "INVALID_UNICODE")],
)  # fmt: skip
def test_a_listing_with_no_one_meaning_is_refused_whole(
    operator: Persona, case: str, reason: str
) -> None:
    """A schema naming a property twice was read as its last value (the server, or a second
    client, may read the first); NaN was pinned as nothing; a lone surrogate left the request
    waiting for its timeout. Each is a 424 MCP_RESPONSE_REFUSED with the reason, nothing
    written."""
    response = operator.post(SERVERS, hostile_stdio(case))
    body = response.json()
    assert response.status_code == 424, body
    assert (body["code"], body["extra"]["reason"]) == ("MCP_RESPONSE_REFUSED", reason)
    assert not McpServer.objects.exists()


def test_a_key_twice_is_refused_over_http_too(operator: Persona) -> None:
    for spec in hostile_http("duplicate-key"):
        body = operator.post(SERVERS, spec).json()
        assert (body["code"], body["extra"]["reason"]) == (
            "MCP_RESPONSE_REFUSED", "DUPLICATE_JSON_KEY"
        )  # fmt: skip


def _signed_in(persona: Persona) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(persona.user)
    return client


def test_the_tools_page_shows_whatever_is_stored_escaped_and_no_form_answers_5xx(
    operator: Persona,
) -> None:
    """Rows stored before names were checked (written here as such a deployment left them)
    must not break the page: ``a/b</x>`` made ``{% url %}`` raise (500). The page shows each
    name escaped, offers no Accept form for it, and every form and the API answer hostile
    values without a 5xx."""
    created = operator.post(SERVERS, hostile_stdio("names"))
    assert created.status_code == 201
    server = McpServer.objects.get()
    listing = {"name": "x", "description": "<script>alert(1)</script>",
               "inputSchema": {"type": "object"}}  # fmt: skip
    for name in ("a/b</x>", "<script>alert(2)</script>", "..", "x\ny"):
        McpTool.objects.create(server=server, name=name, listing={**listing, "name": name},
                               listed_pin="0" * 64)  # fmt: skip
    client = _signed_in(operator)
    page = client.get("/tools/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "a/b&lt;/x&gt;" in html
    assert "<script>alert" not in html
    assert html.count("This name is not an MCP tool name") == 4
    assert operator.get(SERVERS).status_code == 200

    problems, posted = [], 0
    for form in crawl(client, "/tools/"):
        if form.route != "mcp-tool-accept":
            continue
        for label, data in variants(form):
            response = submit(client, operator.user, form, data)
            posted += 1
            if response.status_code >= 500:
                problems.append(f"{form.action} {label}: {response.status_code}")
    policies = [
        json.dumps(READ_POLICY),
        json.dumps({**READ_POLICY, "capability": "a\x00b"}),
        '{"capability": "x:y", "capability": "notes:read"}',
        '{"timeout_ms": Infinity}',
    ]
    for name in ("fine", "a%2Fb%3C%2Fx%3E", "..", "x%0Ay", "nope"):
        for policy in policies:
            body = '{"listed_pin": "' + "0" * 64 + '", "policy": ' + policy + "}"
            response = operator.post_raw(f"{SERVERS}hostile/tools/{name}/accept/", body,
                                         "application/json")  # fmt: skip
            posted += 1
            if response.status_code >= 500:
                problems.append(f"API accept {name} {policy}: {response.status_code}")
    assert posted > 50
    assert not problems, "\n".join(problems[:40])


def _ctx() -> ToolContext:
    return ToolContext(run_id="run-1", subject="alice", step=1, idempotency_token="t" * 64,
                       deadline_ms=0, cancel=CancelSignal(), secrets={})  # fmt: skip


@pytest.mark.parametrize("tool", ["nul_text", "twin_keys"])
@pytest.mark.parametrize("read_only", [True, False], ids=["read", "write"])
def test_an_answer_we_cannot_keep_is_refused_not_stored(tool: str, read_only: bool) -> None:
    """A NUL in a result's text failed the step's commit on PostgreSQL; structured content
    with a key twice was kept as its last value. The call was made, so a write's effect is
    unknown (reconciled or handed to a person); a read failed and may be asked again."""
    spec = McpServerSpec.model_validate(hostile_stdio("names"))
    listed = {t["name"]: t for t in list_tools(spec, secrets={}, timeout_s=TIMEOUT_MS / 1000)}
    outcome = call_tool(spec, tool=tool, arguments={}, ctx=_ctx(), pin=pin(listed[tool]),
                        read_only=read_only, timeout_ms=TIMEOUT_MS)  # fmt: skip
    expected = OutcomeStatus.FAILED if read_only else OutcomeStatus.UNKNOWN
    assert (outcome.status, outcome.code) == (expected, "MCP_RESPONSE_REFUSED")
    assert outcome.value is None


def test_the_strict_reader_stands_in_for_the_sdks() -> None:
    """policy.mcp.wire replaces the adapter both SDK client transports parse with; an SDK that
    moved it would silently read duplicate keys again."""
    assert isinstance(mcp_types.jsonrpc_message_adapter, StrictMessages)
    assert isinstance(streamable_http.jsonrpc_message_adapter, StrictMessages)
    assert sys.modules["mcp.client.stdio"].types is mcp_types
