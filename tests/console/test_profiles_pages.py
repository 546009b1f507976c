"""The run-profile pages (issue 11 item 7), with Django's test client.

``/profiles/`` (operators): list, create, edit, archive — refused input is a 400 page with the
stable code and nothing saved. ``/runs/new/`` (everyone signed in): only the profiles you may use;
a run started there has exactly the profile's grants and you land on its page.

Personas: ``operator`` (defines profiles), ``alice`` (a user named by one profile), ``bob`` (a
user no profile names), anonymous.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agentconsole import wiring
from policy.models import Grant
from runs import services
from runs.demo.demo_profiles import DEMO_PROFILES, load_demo_profiles
from runs.models import Run, RunProfile
from runs.start import profiles
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: None)


# operator: defines profiles; alice: a user one profile names; bob: a user none names.
operator = pytest.fixture(name="operator")(lambda: make_user("operator", "operator"))
alice = pytest.fixture(name="alice")(lambda: make_user("alice", "user"))
bob = pytest.fixture(name="bob")(lambda: make_user("bob", "user"))


@pytest.fixture
def demo(operator: Any, alice: Any) -> None:
    load_demo_profiles(by=operator)
    data = {**DEMO_PROFILES[0], "name": "alice-only", "audience": "users", "users": ["alice"]}
    profiles.profile_create(data=data, by=operator)


def client_for(user: Any, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def form(**changes: Any) -> dict[str, Any]:
    """The create form as a browser posts it: the demo's read-only research profile."""
    research = DEMO_PROFILES[0]
    data = {
        "name": "new-research",
        "description": "From the form",
        "audience": "all",
        "users": "",
        "groups": "",
        "planner_kind": "fixture",
        "planner_outputs": json.dumps(research["planner"]["outputs"]),
        "tools": ["search_public"],
        "grant_templates": json.dumps(research["grant_templates"]),
        **research["budgets"],
    }
    data.update(changes)
    return data


def test_operator_sees_the_profiles_and_the_form(operator: Any, demo: None) -> None:
    page = client_for(operator).get("/profiles/")
    assert page.status_code == 200
    html = page.content.decode()
    for p in DEMO_PROFILES:
        assert f'data-profile="{p["name"]}"' in html
    assert "memory:write</code> on <code>{subject}" in html
    assert 'name="grant_templates"' in html


@pytest.mark.parametrize(("who", "path"), [("operator", "/profiles/"), ("alice", "/runs/new/")])
def test_the_lists_cost_the_same_for_more_profiles(
    operator: Any, alice: Any, demo: None, who: str, path: str
) -> None:
    client = client_for(operator if who == "operator" else alice)
    client.get(path)  # warm the session

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(path).status_code == 200
        return len(queries)

    before = count()
    for i in range(5):
        profiles.profile_create(data=_as_data() | {"name": f"more-{i}"}, by=operator)
    assert count() == before


def _as_data() -> dict[str, Any]:
    research = DEMO_PROFILES[0]
    return {k: research[k] for k in ("planner", "tools", "grant_templates", "budgets")} | {
        "users": [], "groups": [],
    }  # fmt: skip


@pytest.mark.parametrize(
    "path", ["/profiles/", "/profiles/1/", "/profiles/1/archive/"]
)  # fmt: skip
def test_users_do_not_find_the_profile_pages(alice: Any, demo: None, path: str) -> None:
    client = client_for(alice)
    assert client.get(path).status_code in (404, 405)
    assert client.post(path, form(name="sneaky")).status_code == 404
    assert not RunProfile.objects.filter(name="sneaky").exists()


def test_anonymous_is_sent_to_sign_in() -> None:
    for path in ("/profiles/", "/runs/new/"):
        response = Client().get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


def test_operator_creates_a_profile(operator: Any) -> None:
    response = client_for(operator).post("/profiles/", form())
    assert response.status_code == 302, response.content.decode()[:500]
    assert response["Location"] == "/profiles/#main"
    row = RunProfile.objects.get(name="new-research")
    assert (row.tools, row.created_by, row.budgets["deadline_s"]) == (
        ["search_public"], operator, 120,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"grant_templates": json.dumps([{"capability": "search:public",
                                          "resource_scope": "{subject}/../x",
                                          "expires_at_step": 3}])}, "PROFILE_TEMPLATE_INVALID"),
        ({"grant_templates": "[{not json"}, "FORM_INVALID"),
        ({"planner_outputs": '{"kind": "final"}'}, "FORM_INVALID"),
        ({"max_steps": "many"}, "FORM_INVALID"),
        ({"tools": ["rm_rf"]}, "FORM_INVALID"),
        ({"name": "Bad Name"}, "FORM_INVALID"),
        ({"audience": "users", "users": "nobody"}, "PROFILE_AUDIENCE_UNKNOWN"),
        ({"planner_outputs": json.dumps([{"kind": "tool", "tool_name": "write_artifact"}])},
         "PROFILE_TOOL_NOT_ALLOWED"),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_with_its_code_and_nothing_saved(
    operator: Any, changes: dict[str, Any], code: str
) -> None:
    response = client_for(operator).post("/profiles/", form(**changes))
    assert response.status_code == 400
    assert code in response.content.decode()
    assert not RunProfile.objects.exists()


def _outputs_with(value: str) -> str:
    """The demo's planner outputs with ``value`` (JSON text) as the search query."""
    text = json.dumps(DEMO_PROFILES[0]["planner"]["outputs"])
    assert '"retry quarantine queue"' in text
    return text.replace('"retry quarantine queue"', value)


@pytest.mark.parametrize(
    ("field", "text", "said"),
    [
        ("planner_outputs", _outputs_with("NaN"), "NaN is not a JSON number"),
        ("planner_outputs", _outputs_with("1e999"), "NaN and Infinity are not JSON"),
        ("planner_outputs", _outputs_with('"a\\u0000b"'), "NUL characters"),
        ("planner_outputs", _outputs_with('"\\ud800"'), "not valid Unicode"),
        ("planner_outputs", _outputs_with('"a", "query": "b"'), "&quot;query&quot; appears twice"),
        ("grant_templates", '[{"capability": "search:public", "capability": "memory:write", '
         '"resource_scope": "public", "expires_at_step": 3}]', "appears twice"),
        ("tool_policy", '{"search_public": {"confirmation": "never", "confirmation": "always"}}',
         "appears twice"),
    ],
)  # fmt: skip
def test_json_fields_refuse_what_has_no_one_meaning_or_cannot_be_stored(
    operator: Any, field: str, text: str, said: str
) -> None:
    """issue 21 items 8 and 9: NaN, 1e999, a NUL or a lone surrogate in the planner outputs
    was a 500 on PostgreSQL (the jsonb insert failed); a key twice was saved as its last value.
    Now each is the form's 400 with the field named, and nothing is saved."""
    response = client_for(operator).post("/profiles/", form(**{field: text}))
    assert response.status_code == 400, response.content.decode()[:300]
    page = response.content.decode()
    assert "FORM_INVALID" in page
    assert said in page
    assert not RunProfile.objects.exists()


def test_a_taken_name_is_a_409(operator: Any, demo: None) -> None:
    response = client_for(operator).post("/profiles/", form(name="research"))
    assert response.status_code == 409
    assert "PROFILE_NAME_TAKEN" in response.content.decode()


def test_operator_edits_and_a_stale_edit_is_refused(operator: Any, demo: None) -> None:
    row = RunProfile.objects.get(name="research")
    client = client_for(operator)
    page = client.get(f"/profiles/{row.pk}/").content.decode()
    assert 'value="research"' in page
    assert 'name="version" value="1"' in page
    saved = client.post(f"/profiles/{row.pk}/", form(name="research", description="v2", version=1))
    assert saved.status_code == 302
    assert RunProfile.objects.get(pk=row.pk).version == 2
    stale = client.post(f"/profiles/{row.pk}/", form(name="research", description="v3", version=1))
    assert stale.status_code == 409
    assert "PROFILE_VERSION_CONFLICT" in stale.content.decode()
    assert RunProfile.objects.get(pk=row.pk).description == "v2"


def test_operator_archives_a_profile(operator: Any, alice: Any, demo: None) -> None:
    row = RunProfile.objects.get(name="research")
    client = client_for(operator)
    assert client.get(f"/profiles/{row.pk}/archive/").status_code == 405
    assert client.post(f"/profiles/{row.pk}/archive/").status_code == 302
    assert RunProfile.objects.get(pk=row.pk).archived_at is not None
    assert "research" not in [p.name for p in profiles.profiles_usable_by(user=alice)]
    assert client.get("/profiles/99999/").status_code == 404


def test_every_post_needs_the_csrf_token(operator: Any, alice: Any, demo: None) -> None:
    row = RunProfile.objects.get(name="research")
    for user, path, data in (
        (operator, "/profiles/", form()),
        (operator, f"/profiles/{row.pk}/", form(name="research", version=1)),
        (operator, f"/profiles/{row.pk}/archive/", {}),
        (alice, "/runs/new/", {"profile": str(row.pk), "goal": "g"}),
    ):
        assert client_for(user, csrf=True).post(path, data).status_code == 403, path
    assert RunProfile.objects.get(pk=row.pk).version == 1
    assert not Run.objects.exists()


def test_new_run_shows_only_the_profiles_you_may_use(alice: Any, bob: Any, demo: None) -> None:
    alices = client_for(alice).get("/runs/new/").content.decode()
    bobs = client_for(bob).get("/runs/new/").content.decode()
    assert "alice-only" in alices
    assert "alice-only" not in bobs
    for p in DEMO_PROFILES:
        assert p["name"] in bobs
    # The grants a run of theirs would get: {subject} is shown expanded, for each user.
    assert "<code>memory:write</code> on <code>alice</code>" in alices
    assert "<code>memory:write</code> on <code>bob</code>" in bobs


def test_a_user_name_that_would_widen_a_scope_starts_nothing(operator: Any, demo: None) -> None:
    sneaky = make_user("a..b", "user")
    row = RunProfile.objects.get(name="research-save-preference")
    client = client_for(sneaky)
    assert "{subject}" in client.get("/runs/new/").content.decode()  # not expanded
    response = client.post("/runs/new/", {"profile": str(row.pk), "goal": "g"})
    assert response.status_code == 400
    assert "PROFILE_SUBJECT_UNSAFE" in response.content.decode()
    assert not Run.objects.exists()


def test_new_run_without_profiles_says_whom_to_ask(alice: Any) -> None:
    page = client_for(alice).get("/runs/new/").content.decode()
    assert "Ask an operator" in page


def test_starting_a_run_lands_on_its_page(alice: Any, demo: None) -> None:
    row = RunProfile.objects.get(name="research-save-preference")
    response = client_for(alice).post("/runs/new/", {"profile": str(row.pk), "goal": "footnotes"})
    run = Run.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run.pk}/"
    assert (run.owner, run.subject, run.goal) == (alice, "alice", "footnotes")
    scopes = list(Grant.objects.filter(run=run).order_by("id").values_list("resource_scope"))
    assert scopes == [("public",), ("alice",)]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ({"profile": "alice-only", "goal": "g"}, "PROFILE_NOT_FOUND"),  # not for bob
        ({"profile": "research", "goal": "g"}, "PROFILE_NOT_FOUND"),  # the form takes ids
        ({"profile": "999999", "goal": "g"}, "PROFILE_NOT_FOUND"),
        ({"goal": "g"}, "PROFILE_NOT_FOUND"),
    ],
)
def test_starting_with_bad_input_is_a_400_with_its_code(
    bob: Any, demo: None, data: dict[str, Any], code: str
) -> None:
    forbidden = RunProfile.objects.get(name="alice-only")
    data = {k: str(forbidden.pk) if v == "alice-only" else v for k, v in data.items()}
    response = client_for(bob).post("/runs/new/", data)
    assert response.status_code == 400
    assert code in response.content.decode()
    assert not Run.objects.exists()


def test_an_empty_goal_is_a_400(alice: Any, demo: None) -> None:
    row = RunProfile.objects.get(name="research")
    response = client_for(alice).post("/runs/new/", {"profile": str(row.pk), "goal": ""})
    assert response.status_code == 400
    assert "FORM_INVALID" in response.content.decode()
    assert not Run.objects.exists()


def test_profile_text_is_never_html(operator: Any, alice: Any) -> None:
    data = _as_data() | {"name": "xss", "description": "<script>alert(1)</script>"}
    profiles.profile_create(data=data, by=operator)
    for user, path in ((alice, "/runs/new/"), (operator, "/profiles/")):
        html = client_for(user).get(path).content.decode()
        assert "<script>alert(1)</script>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_post_that_is_not_the_form_is_a_short_400(operator: Any) -> None:
    client = client_for(operator)
    body = json.dumps(form())
    response = client.post("/profiles/", data=body, content_type="application/json")
    assert response.status_code == 400
    assert "FORM_INVALID" in response.content.decode()
    assert 'name="grant_templates"' not in response.content.decode()
    assert not RunProfile.objects.exists()


def test_the_admin_shows_a_profile_read_only_with_redacted_fields_masked(demo: None) -> None:
    row = RunProfile.objects.get(name="write-report")
    root = make_user("root", superuser=True)
    page = client_for(root).get(f"/admin/runs/runprofile/{row.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "write_artifact" in html
    assert "quarantine queue for a person" not in html  # the report's content is redacted
    assert 'name="name"' not in html  # read-only: no form fields


def test_operator_points_a_profile_at_a_configured_model_endpoint(
    operator: Any, settings: Any
) -> None:
    settings.AGENTCONSOLE_MODEL_ENDPOINTS = {
        "local": {"base_url": "http://127.0.0.1:9/v1", "api_key": "k", "model": "m"}
    }
    page = client_for(operator).get("/profiles/").content.decode()
    assert '<option value="local">local</option>' in page
    assert "http://127.0.0.1:9/v1" not in page  # the page names endpoints, never their URL
    model = {"planner_kind": "openai", "planner_endpoint": "local", "planner_outputs": "",
             "planner_model": "qwen2.5-7b", "max_tokens": "9000"}  # fmt: skip
    response = client_for(operator).post("/profiles/", form(**model))
    assert response.status_code == 302, response.content.decode()[:500]
    row = RunProfile.objects.get(name="new-research")
    assert row.planner == {"kind": "openai", "endpoint": "local", "model": "qwen2.5-7b"}
    assert row.budgets["max_tokens"] == 9000
    edit = client_for(operator).get(f"/profiles/{row.pk}/").content.decode()
    assert '<option value="local" selected>local</option>' in edit


def test_a_model_planner_without_an_endpoint_is_refused(operator: Any) -> None:
    response = client_for(operator).post("/profiles/", form(planner_kind="openai"))
    assert response.status_code == 400
    assert "PROFILE_PLANNER_INVALID" in response.content.decode()


# ---- the tool policy field (issue 12 item 3) ---------------------------------------------------


def test_operator_sets_a_tool_policy_that_tightens(operator: Any) -> None:
    policy = {"search_public": {"confirmation": "always", "approvers": "operator"}}
    response = client_for(operator).post("/profiles/", form(tool_policy=json.dumps(policy)))
    assert response.status_code == 302, response.content.decode()[:500]
    row = RunProfile.objects.get(name="new-research")
    assert row.tool_policy == policy
    edit = client_for(operator).get(f"/profiles/{row.pk}/").content.decode()
    assert "when_untrusted" in edit  # the field's help names the policies
    assert "&quot;approvers&quot;: &quot;operator&quot;" in edit


@pytest.mark.parametrize(
    ("tool_policy", "code"),
    [
        ("[1]", "FORM_INVALID"),
        ('{"search_public": {"confirmation": "sometimes"}}', "TOOL_POLICY_INVALID"),
        ('{"search_public": {"approve": "owner"}}', "TOOL_POLICY_INVALID"),
        ('{"write_artifact": {"confirmation": "always"}}', "PROFILE_TOOL_NOT_ALLOWED"),
    ],
)
def test_a_bad_tool_policy_is_a_400_and_nothing_saved(
    operator: Any, tool_policy: str, code: str
) -> None:
    response = client_for(operator).post("/profiles/", form(tool_policy=tool_policy))
    assert response.status_code == 400
    assert code in response.content.decode()
    assert not RunProfile.objects.exists()


def test_a_tool_policy_looser_than_the_deployment_is_a_400(operator: Any, settings: Any) -> None:
    settings.AGENTCONSOLE_TOOL_POLICY = {"search_public": {"confirmation": "when_untrusted"}}
    wiring.tool_policy.cache_clear()
    try:
        loose = json.dumps({"search_public": {"confirmation": "never"}})
        response = client_for(operator).post("/profiles/", form(tool_policy=loose))
    finally:
        wiring.tool_policy.cache_clear()
    assert response.status_code == 400
    assert "TOOL_POLICY_LOOSENS" in response.content.decode()
    assert not RunProfile.objects.exists()


# --- secrets (issue 21 item 11) -----------------------------------------------------------------

LIVE_KEY = "sk_live_ReTllpYQYfIZu2Jnf2lAPFjD"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


def test_a_secret_in_a_description_is_stored_and_shown_masked(operator: Any, alice: Any) -> None:
    """Before the fix the description was stored raw and shown to every user on /runs/new/."""
    described = form(description=f"Billing: use {LIVE_KEY} or {AWS_KEY}.")
    assert client_for(operator).post("/profiles/", described).status_code == 302
    row = RunProfile.objects.get(name="new-research")
    assert LIVE_KEY not in row.description
    assert AWS_KEY not in row.description
    assert row.description.startswith("Billing: use [secret:hmac-sha256:")
    for page in ("/runs/new/", "/api/profiles/"):
        html = client_for(alice).get(page).content.decode()
        assert "Billing: use [secret:hmac-sha256:" in html, page
        assert [k for k in (LIVE_KEY, AWS_KEY) if k in html] == [], page


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"planner_outputs": json.dumps([{"kind": "tool", "tool_name": "search_public",
           "tool_version": "1", "proposal_id": "p1",
           "arguments": {"query": f"billing {LIVE_KEY}"}}])},
         "planner.outputs[0].arguments.query"),
        ({"grant_templates": json.dumps([{"capability": "search:public",
           "resource_scope": "public", "expires_at_step": 3,
           "constraints": {"query": {"equals": AWS_KEY}}}])},
         "grant_templates[0].constraints.query.equals"),
    ],
)  # fmt: skip
def test_a_secret_in_what_runs_execute_is_refused(
    operator: Any, changes: dict[str, Any], where: str
) -> None:
    """Masking a script or a constraint would change what runs do: refused, nothing saved."""
    response = client_for(operator).post("/profiles/", form(**changes))
    assert response.status_code == 400
    page = response.content.decode()
    # (The refused form is shown again to the operator who typed it, as they typed it.)
    assert "PROFILE_HOLDS_SECRET" in page
    assert where in page
    assert not RunProfile.objects.exists()


def test_a_profile_stored_raw_before_is_shown_masked(operator: Any, alice: Any) -> None:
    """A row written before the scanner ran on profiles: every page and the API mask it."""
    profiles.profile_create(data={**DEMO_PROFILES[0], "name": "old"}, by=operator)
    RunProfile.objects.filter(name="old").update(
        description=f"key {LIVE_KEY}",
        grant_templates=[{"capability": "search:public", "resource_scope": "public",
                          "expires_at_step": 3, "constraints": {"corpus": {"equals": AWS_KEY}}}],
    )  # fmt: skip
    row = RunProfile.objects.get(name="old")
    shown = [
        client_for(alice).get("/runs/new/"),
        client_for(alice).get("/api/profiles/"),
        client_for(operator).get("/profiles/"),
        client_for(operator).get(f"/profiles/{row.pk}/"),
    ]
    for response in shown:
        assert response.status_code == 200
        html = response.content.decode()
        assert [k for k in (LIVE_KEY, AWS_KEY) if k in html] == [], response.request["PATH_INFO"]
        assert "[secret:hmac-sha256:" in html, response.request["PATH_INFO"]
