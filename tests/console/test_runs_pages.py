"""The console's runs pages (runs/views/runs.py): the runs list and a run's detail, and cancel.

Personas and what each may do here (tests/support/personas.py):
- ``alice`` (user): her own runs only; cancels her own run while it has not finished.
- ``bob`` (user): the outsider; alice's runs are 404 to him (existence not disclosed).
- ``operator``: every run; cancels any unfinished run.
- ``reviewer``: every run; cancels none (PERMISSION_DENIED).
"""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from runs import models as m
from runs import services
from runs.tools.corpus import document_load
from runs.web import console_selectors as cs
from tests.api.api_kit import created_run, load_fixture, scenario_run
from tests.support.personas import make_user, user_fixture

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_worker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No Celery here: what would be enqueued is recorded instead."""
    sent: list[str] = []
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: sent.append(run_id))
    return sent


def client_for(user: Any, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


alice = user_fixture("alice", "user")
bob = user_fixture("bob", "user")


def bulk_runs(owner: Any, n: int, *, status: str = "completed", goal: str = "goal") -> list[str]:
    """``n`` rows as the list reads them. Inserted directly: the list only reads runs, and
    creating a hundred through run_create would hit the per-subject limits this page does not
    test."""
    rows = [
        m.Run(
            id=f"run_{uuid.uuid4().hex}", subject=owner.get_username(), goal=f"{goal} {i}",
            owner=owner, status=status, max_steps=5, max_tool_calls=5, max_repeated_proposal=2,
            deadline_ms=0,
        )
        for i in range(n)
    ]  # fmt: skip
    m.Run.objects.bulk_create(rows)
    return [r.pk for r in rows]


def listed(response: Any) -> list[str]:
    return re.findall(r'data-run-row="([^"]+)"', response.content.decode())


def error_code(response: Any) -> str:
    found = re.search(r'Code: <span class="mono">([A-Z_]+)</span>', response.content.decode())
    return found.group(1) if found else ""


# -- the list ------------------------------------------------------------------------------


def test_anonymous_is_sent_to_sign_in() -> None:
    response = Client().get("/runs/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_a_user_lists_only_their_own_runs_an_operator_every_run(alice: Any, bob: Any) -> None:
    mine = bulk_runs(alice, 2)
    theirs = bulk_runs(bob, 3)
    assert sorted(listed(client_for(alice).get("/runs/"))) == sorted(mine)
    operator = make_user("operator", "operator")
    assert sorted(listed(client_for(operator).get("/runs/"))) == sorted(mine + theirs)


def test_a_run_started_for_a_user_by_someone_else_is_theirs_to_see(alice: Any, bob: Any) -> None:
    admin = make_user("admin", "admin")
    run_id = created_run(admin, subject="alice")
    assert listed(client_for(alice).get("/runs/")) == [run_id]
    assert client_for(alice).get(f"/runs/{run_id}/").status_code == 200
    assert listed(client_for(bob).get("/runs/")) == []
    assert client_for(bob).get(f"/runs/{run_id}/").status_code == 404
    # Theirs to cancel too, as in the API (runs.selectors.is_own_run).
    assert b"Cancel run" in client_for(alice).get(f"/runs/{run_id}/").content
    response = client_for(alice).post(f"/runs/{run_id}/cancel/", {"reason": "not mine to run"})
    assert response.status_code == 302
    assert m.Run.objects.get(pk=run_id).status in ("cancelled", "cancelling")


def test_status_subject_and_goal_filters_and_counts_by_status(alice: Any, bob: Any) -> None:
    done = bulk_runs(alice, 2, status="completed", goal="retry policy")
    failed = bulk_runs(alice, 1, status="failed", goal="quarantine queue")
    bulk_runs(bob, 4, status="failed", goal="retry policy")
    alice_client = client_for(alice)
    assert sorted(listed(alice_client.get("/runs/?status=completed"))) == sorted(done)
    assert listed(alice_client.get("/runs/?q=QUARANTINE")) == failed
    page = alice_client.get("/runs/")
    assert re.search(
        r'data-status-count="completed">completed <span[^>]*>2<', page.content.decode()
    )
    assert re.search(r'data-status-count="failed">failed <span[^>]*>1<', page.content.decode())
    operator = client_for(make_user("operator", "operator"))
    assert len(listed(operator.get("/runs/?subject=bob"))) == 4
    assert listed(operator.get("/runs/?subject=bob&q=quarantine")) == []
    # Counts follow the subject and text filters (not the status one).
    counted = operator.get("/runs/?subject=bob&status=completed").content.decode()
    assert re.search(r'data-status-count="failed">failed <span[^>]*>4<', counted)


def test_keyset_pages_cover_every_run_once_in_order_even_with_equal_times(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cs, "PAGE_SIZE", 4)
    ids = bulk_runs(alice, 10)
    # Half the runs share one creation time: the id breaks the tie, no run is lost or repeated.
    stamp = m.Run.objects.get(pk=ids[0]).created_at
    m.Run.objects.filter(pk__in=ids[:5]).update(created_at=stamp)
    client = client_for(alice)
    seen: list[str] = []
    url = "/runs/"
    for _ in range(5):
        response = client.get(url)
        assert response.status_code == 200
        seen += listed(response)
        found = re.search(r'data-next-page href="\?([^"]+)"', response.content.decode())
        if not found:
            break
        url = "/runs/?" + found.group(1).replace("&amp;", "&")
    expected = list(
        m.Run.objects.filter(pk__in=ids).order_by("-created_at", "-id").values_list("pk", flat=True)
    )
    assert seen == expected
    assert len(set(seen)) == 10


def test_the_cursor_keeps_the_filters(alice: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cs, "PAGE_SIZE", 2)
    bulk_runs(alice, 3, status="failed", goal="needle")
    bulk_runs(alice, 3, status="completed", goal="needle")
    page = client_for(alice).get("/runs/?status=failed&q=needle").content.decode()
    link = re.search(r'data-next-page href="\?([^"]+)"', page)
    assert link is not None
    assert "status=failed" in link.group(1)
    assert "q=needle" in link.group(1)


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("cursor=not-a-cursor", "CURSOR_INVALID"),
        ("cursor=eWVzdGVyZGF5fHJ1bl94", "CURSOR_INVALID"),  # "yesterday|run_x"
        ("cursor=MjAyNi0xMi0wM3xydW4", "CURSOR_INVALID"),  # "2026-12-03|run": no time zone
        ("status=exploded", "FILTER_INVALID"),
        ("subject=" + "s" * 129, "FILTER_INVALID"),
        ("q=" + "q" * 201, "FILTER_INVALID"),
    ],
)
def test_a_bad_filter_or_cursor_is_a_400_page_with_its_code(
    alice: Any, query: str, code: str
) -> None:
    response = client_for(alice).get("/runs/?" + query)
    assert response.status_code == 400
    assert error_code(response) == code
    assert "Traceback" not in response.content.decode()


def test_the_list_costs_the_same_queries_for_10_and_100_runs(alice: Any) -> None:
    operator = make_user("operator", "operator")
    client = client_for(operator)

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/runs/").status_code == 200
        return len(queries)

    bulk_runs(alice, 10)
    few = count()
    bulk_runs(alice, 90)
    assert count() == few


def test_list_links_a_new_run() -> None:
    page = client_for(make_user("carol", "user")).get("/runs/").content.decode()
    assert 'href="/runs/new/"' in page


# -- the detail ----------------------------------------------------------------------------


def seed_run(owner: Any) -> str:
    data = copy.deepcopy(load_fixture("scenarios/seed-walkthrough.json"))
    data["subject"] = owner.get_username()
    return scenario_run(data, owner)["state"]["run_id"]


@pytest.mark.usefixtures("corpus")
def test_detail_shows_state_budgets_trace_observations_ledger_and_linked_citations() -> None:
    alice = make_user("alice", "user")
    run_id = seed_run(alice)
    page = client_for(alice).get(f"/runs/{run_id}/").content.decode()
    run = m.Run.objects.get(pk=run_id)
    # The injected memory write was refused: the run completed, flagged (issue 21 item 2).
    assert re.search(r"<span class=\"badge badge-warn\" data-run-status>completed</span>", page)
    assert 'data-outcome-flag="writes_not_applied"' in page
    assert f"<dd data-run-version>{run.version}</dd>" in page
    assert "FINAL_ANSWER_VALIDATED" in page
    assert f"{run.step} of {run.max_steps}" in page
    assert f"{run.tool_calls} of 3" in page
    trace = page[page.index("data-trace ") :]
    for name in ("planner.output", "proposal.rejected", "tool.completed", "final.validated"):
        assert f'<code class="trace-type">{name}</code>' in trace
    assert "Gate · rejected at semantic: MEMORY_KEY_NOT_ALLOWED" in trace
    assert 'data-step-group="2"' in trace
    # The search result is untrusted: marked, in words.
    obs = re.search(r'<article id="obs-tool-1" class="run-obs untrusted"', page)
    assert obs is not None
    assert "untrusted content" in page
    assert '<a href="#obs-tool-1" class="mono" data-citation="tool-1">tool-1</a>' in page
    token = m.LedgerEntry.objects.get(run_id=run_id).idempotency_token
    assert f'data-ledger-token="{token}"' in page
    assert f'data-last-sequence="{m.TraceEvent.objects.filter(run_id=run_id).count()}"' in page


@pytest.mark.usefixtures("corpus")
def test_untrusted_script_in_an_observation_is_text_never_markup(tmp_path: Any) -> None:
    poisoned = tmp_path / "script-post.md"
    poisoned.write_text("# Script post\nzebracorn <script>alert('owned')</script> <b>bold</b>\n")
    document_load(path=poisoned)
    alice = make_user("alice", "user")
    data = copy.deepcopy(load_fixture("scenarios/seed-walkthrough.json"))
    data["subject"] = "alice"
    data["planner"][0]["arguments"] = {"query": "zebracorn"}
    del data["planner"][1]
    run_id = scenario_run(data, alice)["state"]["run_id"]
    page = client_for(alice).get(f"/runs/{run_id}/").content.decode()
    assert "zebracorn" in page
    assert "<script>alert" not in page
    assert "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(" in page


def test_another_users_run_is_404_and_staff_see_it(alice: Any, bob: Any) -> None:
    run_id = created_run(alice)
    response = client_for(bob).get(f"/runs/{run_id}/")
    assert response.status_code == 404
    assert error_code(response) == "NOT_FOUND"
    assert client_for(bob).get("/runs/run_doesnotexist/").status_code == 404
    for role in ("operator", "reviewer"):
        assert client_for(make_user(role, role)).get(f"/runs/{run_id}/").status_code == 200


def test_the_detail_costs_the_same_queries_for_a_short_and_a_long_trace(alice: Any) -> None:
    short, long = created_run(alice), created_run(alice)
    start = m.TraceEvent.objects.filter(run_id=long).count()
    m.TraceEvent.objects.bulk_create(
        m.TraceEvent(run_id=long, sequence=start + i, event="tool.started", details={"tool": "t"})
        for i in range(1, 301)
    )
    client = client_for(alice)

    def count(run_id: str) -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/runs/{run_id}/").status_code == 200
        return len(queries)

    assert count(short) == count(long)


# -- cancel --------------------------------------------------------------------------------


def test_the_owner_cancels_their_run(alice: Any) -> None:
    run_id = created_run(alice)
    client = client_for(alice, csrf=True)
    page = client.get(f"/runs/{run_id}/")
    assert b"Cancel run" in page.content
    token = page.cookies["csrftoken"].value
    response = client.post(
        f"/runs/{run_id}/cancel/", {"reason": "not needed", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run_id}/"
    assert m.Run.objects.get(pk=run_id).status in ("cancelled", "cancelling")
    event = m.TraceEvent.objects.get(run_id=run_id, event="run.cancel-requested")
    assert event.details["by"] == "alice"
    assert event.details["reason"] == "not needed"
    after = client.get(f"/runs/{run_id}/").content.decode()
    assert "Cancel requested" in after
    assert "Cancel run</button>" not in after


def test_a_cancel_reason_with_markup_shows_as_text_in_the_trace(alice: Any) -> None:
    run_id = created_run(alice)
    client = client_for(alice)
    client.post(f"/runs/{run_id}/cancel/", {"reason": "<script>alert(1)</script>"})
    page = client.get(f"/runs/{run_id}/").content.decode()
    assert "reason=&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert" not in page


def test_cancel_without_the_csrf_token_is_refused_and_changes_nothing(alice: Any) -> None:
    run_id = created_run(alice)
    response = client_for(alice, csrf=True).post(f"/runs/{run_id}/cancel/", {"reason": "x"})
    assert response.status_code == 403
    assert m.Run.objects.get(pk=run_id).status == "created"


def test_cancel_of_another_users_run_is_404_a_reviewers_403(alice: Any, bob: Any) -> None:
    run_id = created_run(alice)
    response = client_for(bob).post(f"/runs/{run_id}/cancel/", {"reason": "x"})
    assert response.status_code == 404
    assert error_code(response) == "NOT_FOUND"
    reviewer = client_for(make_user("reviewer", "reviewer"))
    assert b"Cancel run" not in reviewer.get(f"/runs/{run_id}/").content
    response = reviewer.post(f"/runs/{run_id}/cancel/", {"reason": "x"})
    assert response.status_code == 403
    assert error_code(response) == "PERMISSION_DENIED"
    assert m.Run.objects.get(pk=run_id).status == "created"
    assert not m.TraceEvent.objects.filter(run_id=run_id, event="run.cancel-requested").exists()


def test_cancel_of_a_finished_run_says_so(alice: Any) -> None:
    run_id = created_run(alice)
    client = client_for(alice)
    assert client.post(f"/runs/{run_id}/cancel/", {"reason": "once"}).status_code == 302
    assert m.Run.objects.get(pk=run_id).status == "cancelled"
    response = client.post(f"/runs/{run_id}/cancel/", {"reason": "twice"})
    assert response.status_code == 409
    assert error_code(response) == "RUN_ALREADY_FINISHED"
    assert m.TraceEvent.objects.filter(run_id=run_id, event="run.cancel-requested").count() == 1


def test_cancel_needs_post_and_a_short_reason(alice: Any) -> None:
    run_id = created_run(alice)
    client = client_for(alice)
    assert client.get(f"/runs/{run_id}/cancel/").status_code == 405
    response = client.post(f"/runs/{run_id}/cancel/", {"reason": "r" * 257})
    assert response.status_code == 400
    assert error_code(response) == "VALIDATION_ERROR"
    assert m.Run.objects.get(pk=run_id).status == "created"


def test_the_detail_says_whether_the_trace_verifies(alice: Any) -> None:
    """issue 23 item 5: the page checks the run's hash chain when it loads: verified, broken
    at the first broken link (here an event deleted past the application), or not chained (a
    run from before the chain: no head)."""
    verified, broken, old = created_run(alice), created_run(alice), created_run(alice)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM runs_traceevent WHERE run_id = %s AND sequence = 1", [broken])
    m.Run.objects.filter(pk=old).update(trace_head=None)
    client = client_for(alice)

    def chain(run_id: str) -> str:
        page = client.get(f"/runs/{run_id}/").content.decode()
        return re.search(r"<p class=\"trace-chain\"[^>]*>.*?</p>", page, re.S).group(0)

    assert 'data-trace-chain="verified"' in chain(verified)
    assert "Trace verifies" in chain(verified)
    assert 'data-trace-chain="broken" data-broken-at="1"' in chain(broken)
    assert "Trace broken at event 1" in chain(broken)
    assert "event 1 is missing" in chain(broken)
    assert 'data-trace-chain="not-chained"' in chain(old)
