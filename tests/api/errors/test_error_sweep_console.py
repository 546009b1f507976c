"""issue 21 item 9: the error sweep, extended to the console's forms. No value a browser can
post makes a console page answer 5xx or show a traceback.

Every form the personas reach by following links (tests/support/forms.py: discovered, not
listed) is posted as the page filled it, with no fields, and with each field in turn made
hostile: NaN, 1e999, a NUL, 100,000 characters, numbers out of range, markup, JSON text with
NaN, a NUL, a lone surrogate or a key twice, the field sent twice; and where a field holds JSON
(the profile's planner outputs, grant templates, tool policy), each of its leaves in turn
replaced by NaN, 1e999, a NUL or a lone surrogate, and each of its objects with a key twice.

Each post runs in a transaction that is rolled back after it, so every variant meets the same
data (the first successful post would otherwise archive the profile or decide the
confirmation the others were meant to reach). Meaningful on PostgreSQL, which stores no NUL
and no lone surrogate: before the fix the profile forms answered 500 there.

Personas: ``operator`` (profiles, confirmations, memory, MCP tools), ``reviewer`` (handoffs;
one claimed, so its resolve form shows), ``alice`` (a user: runs, starting runs, her
preferences, one change pending).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agentconsole import wiring
from notify import services as notify_services
from policy.mcp import services as mcp_services
from runs.demo.demo_profiles import load_demo_profiles
from tests.api import api_kit as kit
from tests.mcp.mcp_kit import TIMEOUT_MS, stdio_server
from tests.support.forms import Form, contexts_not_kept, crawl, field_kind, submit, variants

pytestmark = pytest.mark.django_db

# Every console form the setup below shows somewhere: the crawl must find each of them.
EXPECTED_FORMS = {
    "operator": {"profiles", "profile-edit", "profile-archive", "run-new",
                 "confirmation-approve", "confirmation-decline", "confirmation-edit",
                 "confirmation-respond", "memory-revoke",
                 "mcp-tool-accept", "notifications", "notification-subscription-remove",
                 "logout"},
    "reviewer": {"handoff-claim", "handoff-resolve", "logout"},
    "alice": {"run-new", "console-run-cancel", "preference-propose", "preferences-erase",
              "change-confirm", "change-cancel", "preference-revoke", "logout"},
}  # fmt: skip


@pytest.fixture
def console_data(people: kit.People, settings: Any, tmp_path: Path) -> dict[str, list[str]]:
    """Something behind every form: profiles, a run waiting for a confirmation, two handoffs
    (one claimed by the reviewer), alice's preference and a pending change of it, an MCP server
    with tools to accept (the test server, over stdio). Returns the pages each persona reaches
    only through a form's redirect."""
    load_demo_profiles(by=people.operator.user, ctx=wiring.context())
    kit.waiting_run(people.alice.user)
    kit.created_run(people.alice.user)
    claimed = kit.handoff_run(people.alice.user)
    kit.handoff_run(people.alice.user, goal="a second handoff")
    kit.assert_ok(people.reviewer.post(f"/api/handoffs/{claimed.handoff_id}/claim/"))
    kit.preference_set(people.alice.user, "citation_style", "footnote")
    change = kit.pending_change(people.alice.user)
    settings.AGENTCONSOLE_MCP_SECRETS = {"NOTES_TOKEN": "t"}
    server = stdio_server(tmp_path)
    # The deployment allows exactly this server's whole command line (issue 21 item 13).
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = [server.argv]
    settings.AGENTCONSOLE_MCP_LIST_TIMEOUT_S = TIMEOUT_MS / 1000
    mcp_services.mcp_server_register(
        spec=server.spec, by=None, lister=wiring.mcp_lister, allowed_commands=[server.argv]
    )
    notify_services.subscription_create(
        kind="webhook", url="https://hooks.example.test/x", secret="s" * 16,
        events=["confirmation.waiting"],
    )  # fmt: skip
    return {"alice": [f"/preferences/changes/{change.pk}/"]}


@pytest.mark.parametrize("who", sorted(EXPECTED_FORMS))
def test_no_console_form_answers_a_5xx(
    who: str, people: kit.People, console_data: dict[str, list[str]]
) -> None:
    """issue 21 item 9: POST /profiles/ with NaN, 1e999, a NUL or a lone surrogate in a
    planner output's arguments answered 500 on PostgreSQL (the jsonb insert failed)."""
    persona = getattr(people, who)
    client = Client(raise_request_exception=False)
    client.force_login(persona.user)
    forms = crawl(client, *console_data.get(who, []))
    found = {form.route for form in forms}
    assert EXPECTED_FORMS[who] <= found, EXPECTED_FORMS[who] - found
    problems, posted = [], 0
    with contexts_not_kept():
        for form in _distinct(forms):
            for label, data in variants(form):
                response = submit(client, persona.user, form, data)
                posted += 1
                if response.status_code >= 500 or b"Traceback" in response.content:
                    problems.append(f"{form.method} {form.route} {label}: {response.status_code}")
    assert posted > 100
    assert not problems, f"{len(problems)} of {posted}:\n" + "\n".join(problems[:40])


def _distinct(forms: list[Form]) -> list[Form]:
    """One form per (route, kinds of field): a list page repeats one form per row, and each
    profile's editor is the one form with as many grant rows as the profile has grants (its
    rows' fields are one kind each: ``field_kind``). Of those, the one with the most fields:
    the most rows and the most JSON to take apart. A profile of another planner kind checks
    other fields (a model planner's endpoint and model): its editor is swept as well."""
    out: dict[tuple[str, str, frozenset[str], tuple[str, ...]], Form] = {}
    for form in forms:
        kinds = frozenset(map(field_kind, form.fields))
        key = (form.route, form.method, kinds, tuple(form.fields.get("planner_kind", ())))
        if key not in out or len(form.fields) > len(out[key].fields):
            out[key] = form
    return list(out.values())
