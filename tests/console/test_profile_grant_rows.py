"""A profile's grants as form rows (issue 24 item 6): the rows build the list the JSON editor
takes, the domain checks it, and a refusal has the same code as the same grants in JSON,
shown beside the field it is about, with what was typed kept. JSON stays (the other tab).

Personas: ``operator`` (defines profiles; the pages are theirs), ``alice`` (a user: the pages
are 404 to her).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.template.base import Variable, VariableDoesNotExist
from django.test import Client

from runs import services
from runs.demo.demo_profiles import load_demo_profiles
from runs.models import RunProfile
from runs.views.grant_rows import (
    ConstraintRow,
    GrantRow,
    rows_from_post,
    rows_from_templates,
    templates_from_rows,
)
from tests.console.test_profiles_pages import form
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: None)


operator = pytest.fixture(name="operator")(lambda: make_user("operator", "operator"))


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def base(**changes: Any) -> dict[str, Any]:
    """The create form as a browser posts it on the Form tab, with no grant row filled (the
    other tab's JSON field is sent too, and ignored)."""
    tabs = {"grants_mode": "rows", "grant_templates": "[]"}
    return form(name="rows-profile", tools=["search_public", "write_artifact"], **tabs) | changes


def row(i: int, capability: str, scope: str, expires: str, calls: str = "") -> dict[str, str]:
    return {
        f"g-{i}-capability": capability,
        f"g-{i}-resource_scope": scope,
        f"g-{i}-expires_at_step": expires,
        f"g-{i}-max_calls": calls,
    }


def constraint(i: int, j: int, arg: str, kind: str, value: str) -> dict[str, str]:
    return {f"g-{i}-c-{j}-arg": arg, f"g-{i}-c-{j}-kind": kind, f"g-{i}-c-{j}-value": value}


def test_rows_save_the_same_templates_as_json(operator: Any) -> None:
    posted = base(
        **row(0, "search:public", "public", "4"),
        **row(3, "artifact:write", "run-output/{subject}", "6", "2"),  # a gap: a removed row
        **constraint(3, 0, "path", "prefix", "run-output/{subject}/notes"),
        **constraint(3, 2, "size", "maximum", "4096"),
        **constraint(3, 5, "", "equals", ""),  # the blank line the page offers: no constraint
        **row(7, "", "", ""),  # the blank row: no grant
    )
    response = client_for(operator).post("/profiles/", posted)
    assert response.status_code == 302, response.content.decode()[:2000]
    saved = RunProfile.objects.get(name="rows-profile").grant_templates
    assert saved == [
        {"capability": "search:public", "resource_scope": "public", "expires_at_step": 4},
        {
            "capability": "artifact:write",
            "resource_scope": "run-output/{subject}",
            "expires_at_step": 6,
            "max_calls": 2,
            "constraints": {
                "path": {"prefix": "run-output/{subject}/notes"},
                "size": {"maximum": 4096},
            },
        },
    ]
    # The same grants in the JSON tab save the same profile.
    client_for(operator).post(
        "/profiles/",
        base(name="json-profile", grants_mode="json", grant_templates=json.dumps(saved)),
    )
    assert RunProfile.objects.get(name="json-profile").grant_templates == saved


def _refused(operator: Any, posted: dict[str, Any]) -> str:
    response = client_for(operator).post("/profiles/", posted)
    assert response.status_code == 400, response.content.decode()[:500]
    assert not RunProfile.objects.exists()
    return str(response.content.decode())


def _as_json(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return base(grants_mode="json", grant_templates=json.dumps(rows))


@pytest.mark.parametrize(
    ("fields", "same_in_json", "code", "beside", "kept"),
    [
        (row(0, "search:public", "{subject}/../x", "3"),
         [{"capability": "search:public", "resource_scope": "{subject}/../x",
           "expires_at_step": 3}],
         "PROFILE_TEMPLATE_INVALID", "resource_scope", 'value="{subject}/../x"'),
        (row(0, "memory:write", "notes", "3"),
         [{"capability": "memory:write", "resource_scope": "notes", "expires_at_step": 3}],
         "PROFILE_TOOL_NOT_ALLOWED", "capability", '<option value="memory:write" selected>'),
        (row(0, "search:public", "public", "3x"),
         [{"capability": "search:public", "resource_scope": "public", "expires_at_step": "3x"}],
         "PROFILE_INVALID", "expires_at_step", 'value="3x"'),
        (row(0, "search:public", "public", "3", "0"),
         [{"capability": "search:public", "resource_scope": "public", "expires_at_step": 3,
           "max_calls": 0}],
         "PROFILE_INVALID", "max_calls", 'id="id_g-0-max_calls" value="0"'),
        (row(0, "search:public", "public", ""),
         [{"capability": "search:public", "resource_scope": "public"}],
         "PROFILE_INVALID", "expires_at_step", 'value="public"'),
        ({**row(0, "search:public", "public", "3"), **constraint(0, 0, "query", "maximum", "a")},
         [{"capability": "search:public", "resource_scope": "public", "expires_at_step": 3,
           "constraints": {"query": {"maximum": "a"}}}],
         "PROFILE_INVALID", "constraints", 'value="query"'),
        ({**row(0, "search:public", "public", "3"),
          **constraint(0, 0, "query", "pattern", "sk-live-abc123def456ghi789jkl012")},
         [{"capability": "search:public", "resource_scope": "public", "expires_at_step": 3,
           "constraints": {"query": {"pattern": "sk-live-abc123def456ghi789jkl012"}}}],
         "PROFILE_HOLDS_SECRET", "constraints", 'value="query"'),
    ],
)  # fmt: skip
def test_a_bad_row_has_the_json_code_beside_its_field_and_keeps_its_value(
    operator: Any,
    fields: dict[str, str],
    same_in_json: list[dict[str, Any]],
    code: str,
    beside: str,
    kept: str,
) -> None:
    in_json = _refused(operator, _as_json(same_in_json))
    assert f'Code: <span class="mono">{code}</span>' in in_json
    page = _refused(operator, base(**fields))
    assert f'Code: <span class="mono">{code}</span>' in page  # the same code, on top
    # ...and beside the field it is about, in the row.
    if beside == "constraints":
        block = re.search(
            r'<fieldset class="grant-constraints has-error">.*?</fieldset>', page, re.S
        )
    else:
        block = re.search(
            rf'<div class="field[^"]*has-error">\s*<label for="id_g-0-{beside}">.*?</div>',
            page,
            re.S,
        )
    assert block is not None, page[page.find("grant-rows") :][:3000]
    assert f"{code}:" in block.group(0)
    assert kept in page
    assert 'id="grants-mode-json">' in page  # still on the rows, "Edit as JSON" not ticked


def test_a_constraint_without_its_argument_is_the_forms_own_refusal(operator: Any) -> None:
    fields = {**row(0, "search:public", "public", "3"), **constraint(0, 0, "", "prefix", "x")}
    page = _refused(operator, base(**fields))
    assert 'Code: <span class="mono">FORM_INVALID</span>' in page
    assert "A constraint must name the argument it checks." in page
    assert 'value="x"' in page


def test_the_edit_page_shows_the_stored_grants_as_rows(operator: Any) -> None:
    load_demo_profiles(by=operator)
    profile = RunProfile.objects.get(name="research-save-preference")
    page = client_for(operator).get(f"/profiles/{profile.pk}/").content.decode()
    for i, template in enumerate(profile.grant_templates):
        scope = template["resource_scope"]
        assert f'id="id_g-{i}-resource_scope" maxlength="512" value="{scope}"' in page
    assert 'id="grants-mode-json">' in page
    assert "data-grant-template" in page
    json_tab = client_for(operator).get(f"/profiles/{profile.pk}/?grants=json").content.decode()
    assert 'id="grants-mode-json" checked' in json_tab


def test_an_edit_on_the_form_tab_keeps_the_grants_it_did_not_touch(operator: Any) -> None:
    """Rows read back from the stored templates and posted unchanged save the same grants."""
    load_demo_profiles(by=operator)
    profile = RunProfile.objects.get(name="research")
    rows = rows_from_templates(profile.grant_templates)
    posted = base(name="research", tools=profile.tools, version=profile.version)
    for i, r in enumerate(rows):
        posted |= row(i, r.capability, r.resource_scope, r.expires_at_step, r.max_calls)
        for j, c in enumerate(r.constraints):
            posted |= constraint(i, j, c.arg, c.kind, c.value)
    posted["planner_outputs"] = json.dumps(profile.planner["outputs"])
    response = client_for(operator).post(f"/profiles/{profile.pk}/", posted)
    assert response.status_code == 302, response.content.decode()[:1000]
    assert RunProfile.objects.get(pk=profile.pk).grant_templates == profile.grant_templates


# -- the rows without the pages ----------------------------------------------------------------


def test_every_constraint_kind_reads_back_as_it_was_stored() -> None:
    templates = [
        {
            "capability": "c",
            "resource_scope": "s",
            "expires_at_step": 1,
            "constraints": {
                "a": {"equals": "text"},
                "b": {"equals": 5},
                "c": {"one_of": ["x", "y"]},
                "d": {"one_of": [1, "x, y"]},
                "e": {"prefix": "p/"},
                "f": {"maximum": 2.5},
                "g": {"absent_or": {"maximum": 3}},
                "h": {"subset_of": ["r", "w"]},
                "i": {"url_host_in": ["example.com"]},
                "j": {"pattern": "[a-z]+"},
                "k": {"equals": "5"},  # shown as "5" with its quotes: it stays a string
            },
        }
    ]
    assert templates_from_rows(rows_from_templates(templates)) == templates


def test_posted_keys_past_the_limits_are_ignored() -> None:
    data = {
        "g-0-capability": "c",
        "g-100-capability": "x",  # three digits: not a row key
        "g-0-c-8-arg": "past",  # constraint index past MAX_CONSTRAINTS
        "g-0-c-0-arg": "a",
        "g-0-c-0-kind": "equals",
        "g-0-c-0-value": "1",
        "g-0-evil": "x",
    }
    assert rows_from_post(data) == [
        GrantRow(capability="c", constraints=[ConstraintRow(arg="a", kind="equals", value="1")])
    ]


def test_the_page_sends_rows_then_json_when_edit_as_json_is_ticked(operator: Any) -> None:
    """The page's hidden "rows" and its "Edit as JSON" checkbox share a name: the last counts."""
    grants = [{"capability": "search:public", "resource_scope": "public", "expires_at_step": 2}]
    ticked = base(grants_mode=["rows", "json"], grant_templates=json.dumps(grants))
    ticked |= row(0, "search:public", "other", "9")  # the rows are not what is saved
    assert client_for(operator).post("/profiles/", ticked).status_code == 302
    assert RunProfile.objects.get(name="rows-profile").grant_templates == grants


def test_the_edit_page_asks_no_row_for_a_field_it_lacks(
    operator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row and constraint line the page renders has every field the template asks for
    (a row's errors read as empty when it has none): a key Django's template does not find
    costs it an exception and a ``dir()`` each time, and the grant rows asked about ninety
    such per render. Refused rows included."""
    load_demo_profiles(by=operator)
    profile = RunProfile.objects.first()
    assert profile is not None
    missed: list[str] = []
    lookup = Variable._resolve_lookup

    def watched(self: Variable, context: Any) -> Any:
        try:
            return lookup(self, context)
        except VariableDoesNotExist:
            missed.append(self.var)
            raise

    monkeypatch.setattr(Variable, "_resolve_lookup", watched)
    client = client_for(operator)
    assert client.get(f"/profiles/{profile.pk}/").status_code == 200
    refused = base(**row(0, "nope", "", "x", "y"), **{"g-0-c-0-arg": "a", "g-0-c-0-kind": "odd"})
    assert client.post(f"/profiles/{profile.pk}/", refused).status_code == 400  # shown again
    ours = [v for v in missed if v.split(".")[0] in ("row", "c", "form", "blank")]
    assert ours == [], sorted(set(ours))
