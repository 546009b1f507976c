"""The handoff inbox and bundle pages (issue 11 item 4), through the Django test client.

Personas (tests/support/personas.py): ``reviewer`` and ``reviewer2`` claim and resolve (only
the claimant resolves); ``operator`` reads the inbox and bundles but claims nothing (its POSTs
are 404); ``alice`` is a user: every handoff page is a 404 to her; anonymous goes to sign-in.
Handoffs come from real scenario runs (tests/support/handoffs.py), claims and resolutions go
through the pages themselves.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from runs import models as m
from runs.domain.handoff import FORBIDDEN_AUTOMATIC_ACTIONS, RESOLUTION_ACTIONS
from runs.people import handoff_selectors
from tests.support.handoffs import Handed, handoff_run, unknown_effect_run
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def quiet_client_errors(caplog: pytest.LogCaptureFixture) -> None:
    """Refusals are what these tests are made of: Django logs each 4xx as a warning."""
    caplog.set_level(logging.ERROR, logger="django.request")


@pytest.fixture(autouse=True)
def run_output_root(settings: Any, tmp_path: Path) -> Path:
    settings.AGENTCONSOLE_RUN_OUTPUT_ROOT = str(tmp_path)
    return tmp_path


class People:
    """Signed-in clients, one per persona, made on first use (force_login: no password hash)."""

    ROLES = {
        "alice": ("user",),
        "operator": ("operator",),
        "reviewer": ("reviewer",),
        "reviewer2": ("reviewer",),
        "admin": ("admin",),
    }

    def __init__(self) -> None:
        self.users: dict[str, Any] = {}
        self.clients: dict[str, Client] = {}

    def user(self, name: str) -> Any:
        if name not in self.users:
            self.users[name] = make_user(name, *self.ROLES[name])
        return self.users[name]

    def client(self, name: str, *, csrf: bool = False) -> Client:
        key = f"{name}:{csrf}"
        if key not in self.clients:
            client = Client(enforce_csrf_checks=csrf)
            client.force_login(self.user(name))
            self.clients[key] = client
        return self.clients[key]


@pytest.fixture
def people() -> People:
    return People()


def text(response: Any) -> str:
    return response.content.decode()


def claim(people: People, who: str, handed: Handed) -> Any:
    return people.client(who).post(f"/handoffs/{handed.handoff_id}/claim/")


def resolve(people: People, who: str, handed: Handed, action: str, reason: str) -> Any:
    return people.client(who).post(
        f"/handoffs/{handed.handoff_id}/resolve/", {"action": action, "reason": reason}
    )


def assert_refused(response: Any, status: int, code: str) -> str:
    """A refusal is a page with the status and the stable code in words."""
    assert response.status_code == status, text(response)[:2000]
    body = text(response)
    assert f'<span class="mono">{code}</span>' in body, body[:3000]
    return body


def handoff_row(handed: Handed) -> m.Handoff:
    return m.Handoff.objects.select_related("assignee").get(pk=handed.handoff_id)


def resolved_events(handed: Handed) -> list[m.TraceEvent]:
    return list(m.TraceEvent.objects.filter(run_id=handed.run_id, event="handoff.resolved"))


# --- rights -----------------------------------------------------------------------------------


def test_a_user_gets_404_on_every_handoff_page(people: People) -> None:
    handed = handoff_run(people.user("alice"))  # even on the bundle of her own run
    alice = people.client("alice")
    for path in ("/handoffs/", f"/handoffs/{handed.handoff_id}/"):
        assert alice.get(path).status_code == 404
    assert claim(people, "alice", handed).status_code == 404
    assert resolve(people, "alice", handed, "fail", "mine").status_code == 404
    assert handoff_row(handed).status == "open"


def test_anonymous_is_sent_to_sign_in(people: People) -> None:
    handed = handoff_run(people.user("alice"))
    for path in ("/handoffs/", f"/handoffs/{handed.handoff_id}/"):
        response = Client().get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")
    assert Client().post(f"/handoffs/{handed.handoff_id}/claim/").status_code == 302
    assert handoff_row(handed).status == "open"


def test_an_operator_reads_but_does_not_claim_or_resolve(people: People) -> None:
    handed = handoff_run(people.user("alice"))
    inbox = people.client("operator").get("/handoffs/")
    assert inbox.status_code == 200
    assert f'data-handoff="{handed.handoff_id}"' in text(inbox)
    assert f"/handoffs/{handed.handoff_id}/claim/" not in text(inbox)
    page = people.client("operator").get(f"/handoffs/{handed.handoff_id}/")
    assert page.status_code == 200
    assert "/claim/" not in text(page)
    assert "/resolve/" not in text(page)
    assert claim(people, "operator", handed).status_code == 404
    assert handoff_row(handed).status == "open"


def test_unknown_handoffs_are_404(people: People) -> None:
    reviewer = people.client("reviewer")
    for handoff_id in (999999, 0, 10**30):
        assert_refused(reviewer.get(f"/handoffs/{handoff_id}/"), 404, "NOT_FOUND")
        assert_refused(reviewer.post(f"/handoffs/{handoff_id}/claim/"), 404, "NOT_FOUND")
        response = reviewer.post(
            f"/handoffs/{handoff_id}/resolve/", {"action": "fail", "reason": "r"}
        )
        assert_refused(response, 404, "NOT_FOUND")


def test_every_post_needs_the_csrf_token(people: People) -> None:
    handed = handoff_run(people.user("alice"))
    strict = people.client("reviewer", csrf=True)
    assert strict.post(f"/handoffs/{handed.handoff_id}/claim/").status_code == 403
    assert handoff_row(handed).status == "open"
    claim(people, "reviewer", handed)
    response = strict.post(
        f"/handoffs/{handed.handoff_id}/resolve/", {"action": "fail", "reason": "r"}
    )
    assert response.status_code == 403
    assert handoff_row(handed).status == "claimed"
    # With the token the page's form carries, the same post goes through.
    page = strict.get(f"/handoffs/{handed.handoff_id}/")
    token = page.cookies["csrftoken"].value
    response = strict.post(
        f"/handoffs/{handed.handoff_id}/resolve/",
        {"action": "fail", "reason": "r", "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302
    assert handoff_row(handed).status == "resolved"


def test_pages_answer_only_their_methods(people: People) -> None:
    handed = handoff_run(people.user("alice"))
    reviewer = people.client("reviewer")
    assert reviewer.post("/handoffs/").status_code == 405
    assert reviewer.get(f"/handoffs/{handed.handoff_id}/claim/").status_code == 405
    assert reviewer.get(f"/handoffs/{handed.handoff_id}/resolve/").status_code == 405


# --- the inbox --------------------------------------------------------------------------------


def test_inbox_lists_unresolved_handoffs_oldest_first(people: People) -> None:
    alice = people.user("alice")
    first = handoff_run(alice, goal="first goal")
    second = handoff_run(alice, goal="second goal")
    done = handoff_run(alice, goal="done goal")
    claim(people, "reviewer", second)
    claim(people, "reviewer", done)
    assert resolve(people, "reviewer", done, "fail", "closing").status_code == 302

    body = text(people.client("reviewer2").get("/handoffs/"))
    assert body.index("first goal") < body.index("second goal")
    assert "done goal" not in body
    assert "MAX_STEPS_REACHED" in body
    assert 'data-label="Subject">alice<' in body
    # Open: claimable; claimed: who holds it, no claim button.
    assert f"/handoffs/{first.handoff_id}/claim/" in body
    assert f"/handoffs/{second.handoff_id}/claim/" not in body
    row = body[body.index(f'data-handoff="{second.handoff_id}"') :]
    assert ">claimed<" in row[:2000]
    assert ">reviewer<" in row[:2000]
    assert 'data-handoff-total="2"' in body


def test_inbox_filters_by_reason(people: People) -> None:
    handed = handoff_run(people.user("alice"), goal="budget ran out")
    reviewer = people.client("reviewer")
    body = text(reviewer.get("/handoffs/", {"reason": "MAX_STEPS_REACHED"}))
    assert f'data-handoff="{handed.handoff_id}"' in body
    assert '<option value="MAX_STEPS_REACHED" selected>' in body
    body = text(reviewer.get("/handoffs/", {"reason": "TOOL_OUTCOME_UNKNOWN"}))
    assert f'data-handoff="{handed.handoff_id}"' not in body
    assert "No unresolved handoff with reason TOOL_OUTCOME_UNKNOWN" in body
    assert_refused(reviewer.get("/handoffs/", {"reason": "x" * 65}), 400, "VALIDATION_ERROR")


def test_inbox_query_count_does_not_grow_with_the_inbox(people: People) -> None:
    alice = people.user("alice")
    reviewer = people.client("reviewer")
    reviewer.get("/handoffs/")  # the session and the user's roles, once

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert reviewer.get("/handoffs/").status_code == 200
        return len(captured.captured_queries)

    handoff_run(alice)
    short = queries()
    for _ in range(4):
        handed = handoff_run(alice)
    claim(people, "reviewer2", handed)  # a claimant's name is joined, not fetched per row
    long = queries()
    assert short == long
    # session, user, groups (roles), rows, count, reasons
    assert long == 6, long


def test_inbox_shows_the_oldest_page_and_says_how_many_wait(
    people: People, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handoff_selectors, "INBOX_LIMIT", 2)
    alice = people.user("alice")
    handed = [handoff_run(alice, goal=f"goal number {i}") for i in range(3)]
    body = text(people.client("reviewer").get("/handoffs/"))
    assert f'data-handoff="{handed[0].handoff_id}"' in body
    assert f'data-handoff="{handed[1].handoff_id}"' in body
    assert f'data-handoff="{handed[2].handoff_id}"' not in body
    assert "Showing the oldest 2 of 3" in body


def test_a_long_goal_is_cut_in_the_inbox_and_whole_in_the_bundle(people: People) -> None:
    goal = "a very long goal " + "x" * 3000 + " THE END"
    handed = handoff_run(people.user("alice"), goal=goal)
    reviewer = people.client("reviewer")
    inbox = text(reviewer.get("/handoffs/"))
    assert f'data-handoff="{handed.handoff_id}"' in inbox
    assert "a very long goal" in inbox
    assert "THE END" not in inbox
    assert "THE END" in text(reviewer.get(f"/handoffs/{handed.handoff_id}/"))


def test_untrusted_text_is_never_html(people: People) -> None:
    goal = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    handed = handoff_run(people.user("alice"), goal=goal)
    reviewer = people.client("reviewer")
    for path in ("/handoffs/", f"/handoffs/{handed.handoff_id}/"):
        body = text(reviewer.get(path))
        assert "<script>alert" not in body
        assert "<img src=x" not in body
        assert html.escape(goal)[:40] in body


# --- claim ------------------------------------------------------------------------------------


def test_claim_then_a_second_claimer_is_told_who_holds_it(people: People) -> None:
    handed = handoff_run(people.user("alice"))
    response = claim(people, "reviewer", handed)
    assert response.status_code == 302
    assert response["Location"] == f"/handoffs/{handed.handoff_id}/"
    page = people.client("reviewer").get(response["Location"])
    assert f"You claimed handoff {handed.handoff_id}" in text(page)
    assert "/resolve/" in text(page)

    body = assert_refused(claim(people, "reviewer2", handed), 409, "HANDOFF_NOT_OPEN")
    assert "already claimed by reviewer" in body
    assert "/resolve/" not in body  # the bundle again, without the commands
    row = handoff_row(handed)
    assert (row.status, row.assignee) == ("claimed", people.user("reviewer"))
    events = m.TraceEvent.objects.filter(run_id=handed.run_id, event="handoff.claimed")
    assert events.count() == 1


# --- resolve ----------------------------------------------------------------------------------


def test_resolve_without_a_claim_is_refused(people: People) -> None:
    handed = handoff_run(people.user("alice"))
    assert_refused(resolve(people, "reviewer", handed, "fail", "why"), 409, "HANDOFF_NOT_CLAIMED")
    assert handoff_row(handed).status == "open"
    assert resolved_events(handed) == []


def test_only_the_claimant_resolves(people: People) -> None:
    handed = handoff_run(people.user("alice"))
    claim(people, "reviewer", handed)
    page = text(people.client("reviewer2").get(f"/handoffs/{handed.handoff_id}/"))
    assert "/resolve/" not in page
    assert "only they may resolve it" in page
    body = assert_refused(
        resolve(people, "reviewer2", handed, "fail", "mine now"), 403, "PERMISSION_DENIED"
    )
    assert "claimed by reviewer" in body
    assert handoff_row(handed).status == "claimed"
    assert resolved_events(handed) == []


@pytest.mark.parametrize(
    ("form", "code"),
    [
        ({"action": "ignore", "reason": "r"}, "HANDOFF_ACTION_UNKNOWN"),
        ({"action": "", "reason": "r"}, "HANDOFF_ACTION_UNKNOWN"),
        ({"reason": "r"}, "HANDOFF_ACTION_UNKNOWN"),
        ({"action": "fail"}, "HANDOFF_REASON_REQUIRED"),
        ({"action": "fail", "reason": ""}, "HANDOFF_REASON_REQUIRED"),
        ({"action": "fail", "reason": "   "}, "HANDOFF_REASON_REQUIRED"),
        ({"action": "fail", "reason": "r" * 257}, "VALIDATION_ERROR"),
    ],
)
def test_bad_resolve_forms_are_400_with_a_code(
    people: People, form: dict[str, str], code: str
) -> None:
    handed = handoff_run(people.user("alice"))
    claim(people, "reviewer", handed)
    response = people.client("reviewer").post(f"/handoffs/{handed.handoff_id}/resolve/", form)
    assert_refused(response, 400, code)
    assert handoff_row(handed).status == "claimed"
    assert resolved_events(handed) == []


def test_a_command_that_does_not_fit_the_handoff_is_refused(people: People) -> None:
    """No effect is in doubt on this run: only cancel and fail are offered, and the service
    refuses the effect commands however they are posted."""
    handed = handoff_run(people.user("alice"))
    claim(people, "reviewer", handed)
    page = text(people.client("reviewer").get(f"/handoffs/{handed.handoff_id}/"))
    offered = [a for a in RESOLUTION_ACTIONS if f'data-action="{a}"' in page]
    assert offered == ["cancel", "fail"]
    assert 'for="reason-fail"' in page
    assert 'id="reason-fail"' in page
    body = assert_refused(
        resolve(people, "reviewer", handed, "mark_effect_present", "checked it"),
        409,
        "HANDOFF_NO_EFFECT",
    )
    assert 'data-action="mark_effect_present"' not in body  # still not offered
    assert handoff_row(handed).status == "claimed"


def test_resolve_records_who_and_why_and_the_bundle_shows_it(people: People) -> None:
    handed = handoff_run(people.user("alice"), goal="budget ran out")
    claim(people, "reviewer", handed)
    response = resolve(people, "reviewer", handed, "fail", "budget too small <b>really</b>")
    assert response.status_code == 302
    page = text(people.client("reviewer").get(response["Location"]))
    assert f"Handoff {handed.handoff_id} resolved." in page
    assert "Resolved by reviewer: fail" in page
    assert "budget too small &lt;b&gt;really&lt;/b&gt;" in page
    assert "/resolve/" not in page
    assert "/claim/" not in page
    (event,) = resolved_events(handed)
    assert (event.details["by"], event.details["action"]) == ("reviewer", "fail")
    assert m.Run.objects.get(pk=handed.run_id).status == "failed"
    inbox = text(people.client("reviewer").get("/handoffs/"))
    assert f'data-handoff="{handed.handoff_id}"' not in inbox
    # Resolving again is refused in words.
    assert_refused(
        resolve(people, "reviewer", handed, "cancel", "again"), 409, "HANDOFF_NOT_CLAIMED"
    )


def test_an_admin_may_stand_in_for_the_claimant(people: People) -> None:
    handed = handoff_run(people.user("alice"))
    claim(people, "reviewer", handed)
    page = text(people.client("admin").get(f"/handoffs/{handed.handoff_id}/"))
    assert 'data-action="fail"' in page
    assert resolve(people, "admin", handed, "cancel", "reviewer is away").status_code == 302
    assert handoff_row(handed).status == "resolved"


# --- the bundle -------------------------------------------------------------------------------


def test_bundle_shows_every_seed_field(people: People) -> None:
    handed = handoff_run(people.user("alice"), goal="what happens after retries?")
    body = text(people.client("reviewer").get(f"/handoffs/{handed.handoff_id}/"))
    bundle = handoff_row(handed).bundle
    assert f'href="/runs/{handed.run_id}/"' in body  # run id
    assert f"{bundle['status']}</span> version {bundle['version']}" in body  # state + version
    assert "what happens after retries?" in body  # goal
    for heading in (
        "Last trusted observations",
        "Pending proposal",
        "Required capability or confirmation",
        "Unknown effects and their reconciliation",
        "Recommended safe actions",
        "Forbidden automatic actions",
    ):
        assert heading in body
    for action in bundle["recommended_safe_actions"]:
        assert html.escape(action) in body
    for observation in bundle["last_trusted_observations"]:
        assert observation["observation_id"] in body


@pytest.mark.django_db(transaction=True)
def test_unknown_effect_is_highlighted_with_its_token(people: People, settings: Any) -> None:
    """faultlab/verification-failed (a tool thread: transaction=True): the write is in doubt;
    the bundle highlights it with its idempotency token, lists what automation must never do,
    and offers exactly the commands that fit a write that failed its check."""
    settings.AGENTCONSOLE_FAULTS_ENABLED = True
    handed = unknown_effect_run(people.user("alice"))
    token = m.LedgerEntry.objects.get(run_id=handed.run_id).idempotency_token
    claim(people, "reviewer", handed)
    body = text(people.client("reviewer").get(f"/handoffs/{handed.handoff_id}/"))

    effect = body[body.index(f'data-effect-token="{token}"') :]
    assert 'class="handoff-effect"' in body
    assert "unknown effect" in effect[:600]
    assert f"Idempotency token <code>{token}</code>" in effect
    assert "compensation-required" in effect
    forbidden = body[body.index("data-forbidden") :]
    for action in FORBIDDEN_AUTOMATIC_ACTIONS:
        assert html.escape(action) in forbidden
    offered = [a for a in RESOLUTION_ACTIONS if f'data-action="{a}"' in body]
    assert offered == ["mark_effect_present", "compensate", "cancel", "fail"]
    # The same rule holds whoever posts, page or API: a failed-check write is not marked
    # absent, nor retried.
    assert_refused(
        resolve(people, "reviewer", handed, "mark_effect_absent", "looks gone"),
        409,
        "HANDOFF_ACTION_NOT_ALLOWED",
    )
    api = people.client("reviewer").post(
        f"/api/handoffs/{handed.handoff_id}/resolve/",
        {"action": "retry_same_token", "reason": "try again"},
        content_type="application/json",
    )
    assert api.status_code == 409
    assert api.json()["code"] == "HANDOFF_ACTION_NOT_ALLOWED"
    assert handoff_row(handed).status == "claimed"
    response = resolve(people, "reviewer", handed, "mark_effect_present", "file checked")
    assert response.status_code == 302
    body = text(people.client("reviewer").get(f"/handoffs/{handed.handoff_id}/"))
    assert "Resolved by reviewer: mark_effect_present" in body
    assert ">reconciled</span>" in body  # reconciliation status now
    assert "handoff-effect-settled" in body
    assert '<dt>ledger status</dt><dd class="mono">reconciled</dd>' in body
