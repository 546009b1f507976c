"""The memory pages (issue 11 items 5 and 6) through the Django test client.

Personas (tests/support/personas.py): ``alice`` and ``bob`` (group user) own their preferences
only; ``otto`` (operator) and ``ada`` (admin) administer memory at /memory/; a user gets 404
there. Every POST needs the CSRF token (``csrf_client``); every refusal is a page with its code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils.html import escape

from agentconsole import wiring
from memory.models import PreferenceChange, PreferenceHistory, PreferenceRecord
from memory.policies import memory_policies
from memory.services import preference_write
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db

LANG = "answer_language"
STYLE = "citation_style"
HASH = re.compile(r'name="proposal_hash" value="([0-9a-f]{64})"')


@pytest.fixture
def users() -> dict[str, Any]:
    return {
        "alice": make_user("alice", "user"),
        "bob": make_user("bob", "user"),
        "operator": make_user("otto", "operator"),
        "admin": make_user("ada", "admin"),
        "reviewer": make_user("rev", "reviewer"),
    }


@pytest.fixture
def as_user(users: dict[str, Any]) -> Callable[[str], Client]:
    def client(name: str) -> Client:
        c = Client()
        c.force_login(users[name])
        return c

    return client


@pytest.fixture
def free_text_key(settings: Any) -> Iterator[str]:
    """A whitelisted key that takes any text, so a value can hold markup."""
    settings.AGENTCONSOLE_MEMORY_KEYS = [
        {"key": LANG, "max_length": 40, "pattern": r"[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*"},
        {"key": "nickname", "max_length": 100},
    ]
    wiring.memory_policies.cache_clear()
    wiring.registry.cache_clear()
    yield "nickname"
    wiring.memory_policies.cache_clear()
    wiring.registry.cache_clear()


def seed(subject: str, key: str, value: str, *, expected: int | None = None, run: str = "") -> int:
    """Write through the real write protocol (as a confirmed run's tool would)."""
    result = preference_write(
        subject=subject,
        policy=memory_policies()[key],
        value=value,
        expected_version=expected,
        confirmation_id=f"seed-{subject}-{key}-{expected}",
        run_id=run or None,
        idempotency_token=None,
        actor=f"run:{run}" if run else subject,
    )
    assert result.ok, result
    return result.version


def propose(client: Client, key: str, value: str, expected: int | str = "") -> Any:
    return client.post(
        "/preferences/propose/", {"key": key, "value": value, "expected_version": expected}
    )


def shown_hash(client: Client, change_url: str) -> str:
    match = HASH.search(client.get(change_url).content.decode())
    assert match, "the confirmation page shows no hash"
    return match.group(1)


def assert_code(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.content[:500]
    assert code in response.content.decode()


# ---- rights


@pytest.mark.parametrize("path", ["/preferences/", "/memory/", "/memory/alice/answer_language/"])
def test_anonymous_is_sent_to_sign_in(users: Any, path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_a_user_sees_only_their_own_preferences(as_user: Any) -> None:
    seed("alice", LANG, "de", run="run-alice-1")
    seed("bob", LANG, "fr")
    page = as_user("alice").get("/preferences/").content.decode()
    assert "de" in page
    assert 'href="/runs/run-alice-1/"' in page
    assert ">fr<" not in page
    assert "run:run-alice-1" in page  # who: the history names the run that wrote it


def test_the_page_shows_value_version_source_expiry_and_history(as_user: Any) -> None:
    seed("alice", STYLE, "inline")
    seed("alice", STYLE, "footnote", expected=1)
    page = as_user("alice").get("/preferences/").content.decode()
    section = page[page.index(f'id="pref-{STYLE}"') :]
    assert '<code class="pref-value" data-value>footnote</code>' in section
    assert "<dt>Version</dt><dd>2</dd>" in section
    assert "<dt>Expires</dt><dd><time" in section
    assert "History of citation_style (2 changes)" in section
    assert section.index(">footnote<") < section.index(">inline<")  # newest first


def test_a_stored_script_is_shown_as_text_everywhere(as_user: Any, free_text_key: str) -> None:
    evil = "<script>alert(1)</script>"
    seed("alice", free_text_key, evil)
    pages = [
        as_user("alice").get("/preferences/"),
        as_user("operator").get("/memory/?subject=alice"),
        as_user("operator").get(f"/memory/alice/{free_text_key}/"),
        propose(as_user("alice"), free_text_key, evil + "!", 1),
    ]
    change = pages[-1]["Location"]
    pages[-1] = as_user("alice").get(change)
    for response in pages:
        html = response.content.decode()
        assert response.status_code == 200
        assert evil not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_another_users_change_is_not_found(as_user: Any) -> None:
    seed("bob", LANG, "fr")
    location = propose(as_user("bob"), LANG, "es", 1)["Location"]
    digest = shown_hash(as_user("bob"), location)
    alice = as_user("alice")
    assert alice.get(location).status_code == 404
    assert_code(alice.post(location + "confirm/", {"proposal_hash": digest}), 404, "NOT_FOUND")
    assert alice.post(location + "cancel/").status_code == 404
    assert PreferenceRecord.objects.get(subject="bob").value == "fr"
    assert PreferenceChange.objects.get().status == "pending"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/memory/"),
        ("get", "/memory/alice/answer_language/"),
        ("post", "/memory/alice/answer_language/revoke/"),
    ],
)
def test_memory_administration_does_not_exist_for_users(
    as_user: Any, method: str, path: str
) -> None:
    seed("alice", LANG, "de")
    for who in ("bob", "alice", "reviewer"):
        response = getattr(as_user(who), method)(path, {"reason": "x", "expected_version": 1})
        assert response.status_code == 404
    assert PreferenceRecord.objects.get().revoked_at is None


def assert_untouched() -> None:
    """alice's seeded de (version 1) is as it was, and no change was proposed."""
    record = PreferenceRecord.objects.get()
    assert (record.value, record.version, record.revoked_at) == ("de", 1, None)
    assert not PreferenceChange.objects.exists()


def test_every_post_needs_the_csrf_token(users: Any) -> None:
    seed("alice", LANG, "de")
    alice, operator = Client(enforce_csrf_checks=True), Client(enforce_csrf_checks=True)
    alice.force_login(users["alice"])
    operator.force_login(users["operator"])
    posts = [
        (alice, "/preferences/propose/", {"key": LANG, "value": "en", "expected_version": 1}),
        (alice, f"/preferences/{LANG}/revoke/", {"expected_version": 1}),
        (alice, "/preferences/erase/", {"typed": "alice"}),
        (operator, f"/memory/alice/{LANG}/revoke/", {"reason": "x", "expected_version": 1}),
    ]
    for client, path, data in posts:
        response = client.post(path, data)
        assert_code(response, 403, "CSRF")
    assert_untouched()


# ---- edit through the confirmation of the exact value


def test_an_edit_is_written_only_after_its_exact_confirmation(as_user: Any) -> None:
    seed("alice", LANG, "de")
    alice = as_user("alice")
    response = propose(alice, LANG, "pt-BR", 1)
    assert response.status_code == 302
    location = response["Location"]
    assert PreferenceRecord.objects.get().value == "de"  # nothing written yet
    page = alice.get(location).content.decode()
    change = PreferenceChange.objects.get()
    assert '<code class="pref-value" data-old-value>de</code>' in page
    assert '<code class="pref-value pref-new" data-new-value>pt-BR</code>' in page
    assert change.proposal_hash in page
    assert "&quot;expectedVersion&quot;:1" in page  # the exact text the hash covers
    response = alice.post(location + "confirm/", {"proposal_hash": change.proposal_hash})
    assert response.status_code == 302
    assert response["Location"] == "/preferences/"
    record = PreferenceRecord.objects.get()
    assert (record.value, record.version) == ("pt-BR", 2)
    last = PreferenceHistory.objects.order_by("-id").first()
    assert last is not None
    assert (last.actor, last.confirmation_id) == ("alice", f"change:{change.pk}")
    assert "Saved: now version 2." in alice.get("/preferences/").content.decode()


def test_a_new_key_is_set_through_the_same_confirmation(as_user: Any) -> None:
    alice = as_user("alice")
    location = propose(alice, STYLE, "endnote")["Location"]
    assert "(not set)" in alice.get(location).content.decode()
    alice.post(location + "confirm/", {"proposal_hash": shown_hash(alice, location)})
    assert PreferenceRecord.objects.get(subject="alice", key=STYLE).value == "endnote"


def test_a_hash_other_than_the_one_shown_is_refused(as_user: Any) -> None:
    seed("alice", LANG, "de")
    alice = as_user("alice")
    location = propose(alice, LANG, "en", 1)["Location"]
    response = alice.post(location + "confirm/", {"proposal_hash": "0" * 64})
    assert_code(response, 409, "CONFIRMATION_HASH_MISMATCH")
    assert PreferenceRecord.objects.get().value == "de"
    assert_code(alice.post(location + "confirm/", {"proposal_hash": "zz"}), 400, "VALIDATION_ERROR")


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        (LANG, "not a language", "MEMORY_VALUE_INVALID"),
        (STYLE, "sideways", "MEMORY_VALUE_INVALID"),
        ("system_prompt", "obey", "MEMORY_KEY_NOT_ALLOWED"),
        (LANG, "", "MEMORY_VALUE_INVALID"),  # the key's rule says what to type
    ],
)
def test_a_bad_value_is_refused_with_its_code(
    as_user: Any, key: str, value: str, code: str
) -> None:
    assert_code(propose(as_user("alice"), key, value), 400, code)
    assert not PreferenceChange.objects.exists()
    assert not PreferenceRecord.objects.exists()


@pytest.mark.parametrize(
    ("key", "typed", "message"),
    [
        (LANG, "Deutsch (Schweiz)",
         "answer_language takes a language code such as en, de or pt-BR."),
        (STYLE, "<b>sideways</b>", "citation_style takes one of: inline, footnote, endnote."),
        (STYLE, "", "citation_style takes one of: inline, footnote, endnote."),
    ],
)  # fmt: skip
def test_a_refused_value_comes_back_in_its_form_with_words_not_a_pattern(
    as_user: Any, key: str, typed: str, message: str
) -> None:
    """issue 21 item 14: not a dead-end error page showing the key's regular expression, but
    the preferences page again, the typed value kept in its field (escaped), the version the
    user read kept, and a sentence beside the field saying what the key takes."""
    seed("alice", key, "de" if key == LANG else "inline")
    alice = as_user("alice")
    response = propose(alice, key, typed, 1)
    assert response.status_code == 400
    page = response.content.decode()
    field = re.search(rf'<input type="text" id="value-{key}"[^>]*>', page)
    assert field, "the form of the key is shown again"
    assert f'value="{escape(typed)}"' in field.group(0)
    assert 'aria-invalid="true"' in field.group(0)
    assert f"error-{key}" in field.group(0)  # the message describes the field
    assert f'<p class="error" id="error-{key}">{message}' in page
    assert "[A-Za-z]" not in page
    assert "{2,3}" not in page
    section = page[page.index(f'id="pref-{key}"') :]
    assert 'name="expected_version" value="1"' in section[: section.index("</form>")]
    assert not PreferenceChange.objects.exists()
    # The same value typed right goes on to the confirmation.
    assert propose(alice, key, "pt-BR" if key == LANG else "footnote", 1).status_code == 302


def test_a_stale_version_shows_both_values_and_mine_goes_through_confirmation_again(
    as_user: Any,
) -> None:
    seed("alice", LANG, "de")
    alice = as_user("alice")
    location = propose(alice, LANG, "en", 1)["Location"]
    digest = shown_hash(alice, location)
    seed("alice", LANG, "fr", expected=1)  # someone else, meanwhile
    response = alice.post(location + "confirm/", {"proposal_hash": digest})
    assert response["Location"] == location
    page = alice.get(location).content.decode()
    assert "PREFERENCE_VERSION_CONFLICT" in page
    assert '<code class="pref-value" data-current-value>fr</code>' in page
    assert '<code class="pref-value" data-proposed-value>en</code>' in page
    assert f'href="/preferences/#pref-{LANG}">Keep current' in page
    assert PreferenceRecord.objects.get().value == "fr"
    # Apply mine: a new change against the version now current, confirmed again.
    assert 'name="expected_version" value="2"' in page
    again = propose(alice, LANG, "en", 2)["Location"]
    assert again != location
    assert "data-old-value>fr<" in alice.get(again).content.decode()
    alice.post(again + "confirm/", {"proposal_hash": shown_hash(alice, again)})
    record = PreferenceRecord.objects.get()
    assert (record.value, record.version) == ("en", 3)


def test_a_confirmation_is_used_once_and_a_cancelled_one_never(as_user: Any) -> None:
    seed("alice", LANG, "de")
    alice = as_user("alice")
    location = propose(alice, LANG, "en", 1)["Location"]
    digest = shown_hash(alice, location)
    alice.post(location + "confirm/", {"proposal_hash": digest})
    assert_code(
        alice.post(location + "confirm/", {"proposal_hash": digest}),
        400,
        "CONFIRMATION_ALREADY_USED",
    )
    second = propose(alice, LANG, "es", 2)["Location"]
    digest = shown_hash(alice, second)
    assert alice.post(second + "cancel/")["Location"] == "/preferences/"
    assert_code(alice.post(second + "cancel/"), 400, "CHANGE_NOT_PENDING")
    alice.post(second + "confirm/", {"proposal_hash": digest})
    assert PreferenceRecord.objects.get().value == "en"


def test_posts_only_where_a_post_is_meant(as_user: Any) -> None:
    alice = as_user("alice")
    assert alice.get("/preferences/propose/").status_code == 405
    assert alice.post("/preferences/").status_code == 405


HUGE = 10**20


@pytest.mark.parametrize(
    ("who", "method", "path", "data", "status"),
    [
        ("alice", "get", f"/preferences/changes/{HUGE}/", None, 404),
        ("alice", "post", f"/preferences/changes/{HUGE}/confirm/",
         {"proposal_hash": "0" * 64}, 404),
        ("alice", "post", f"/preferences/changes/{HUGE}/cancel/", None, 404),
        ("alice", "post", "/preferences/propose/",
         {"key": LANG, "value": "en", "expected_version": HUGE}, 400),
        ("alice", "post", "/preferences/propose/", {"key": LANG, "value": "en\x00"}, 400),
        ("alice", "post", f"/preferences/{LANG}/revoke/", {"expected_version": HUGE}, 400),
        ("alice", "get", "/preferences/" + "k" * 300 + "/revoke/", None, 404),
        ("operator", "post", f"/memory/alice/{LANG}/revoke/",
         {"reason": "x", "expected_version": HUGE}, 400),
        ("operator", "get", "/memory/", {"subject": "a" * 300}, 400),
        ("operator", "get", "/memory/" + "s" * 300 + "/" + "k" * 300 + "/", None, 404),
    ],
)  # fmt: skip
def test_odd_input_is_a_4xx_page_never_a_500(
    as_user: Any, who: str, method: str, path: str, data: Any, status: int
) -> None:
    seed("alice", LANG, "de")
    response = getattr(as_user(who), method)(path, data or {})
    assert response.status_code == status
    assert_untouched()


# ---- revoke, export, erase


def test_revoke_confirms_the_value_then_keeps_a_tombstone(as_user: Any) -> None:
    seed("alice", LANG, "de")
    alice = as_user("alice")
    page = alice.get(f"/preferences/{LANG}/revoke/").content.decode()
    assert '<code class="pref-value">de</code>' in page
    response = alice.post(
        f"/preferences/{LANG}/revoke/", {"expected_version": 1, "reason": "moving abroad"}
    )
    assert response["Location"] == "/preferences/"
    record = PreferenceRecord.objects.get()
    assert record.revoked_at is not None
    assert record.revoke_reason == "moving abroad"
    row = PreferenceHistory.objects.get(action="revoke")
    assert (row.actor, row.reason) == ("alice", "moving abroad")
    page = alice.get("/preferences/").content.decode()
    assert '<span class="badge badge-bad">revoked</span>' in page
    assert alice.get(f"/preferences/{LANG}/revoke/").status_code == 404


def test_revoke_of_a_value_changed_since_it_was_shown_is_a_conflict(as_user: Any) -> None:
    seed("alice", LANG, "de")
    seed("alice", LANG, "fr", expected=1)
    response = as_user("alice").post(f"/preferences/{LANG}/revoke/", {"expected_version": 1})
    assert_code(response, 409, "PREFERENCE_VERSION_CONFLICT")
    assert PreferenceRecord.objects.get().revoked_at is None


def test_revoke_of_an_unset_or_foreign_key_is_not_found(as_user: Any) -> None:
    seed("bob", LANG, "fr")
    response = as_user("alice").post(f"/preferences/{LANG}/revoke/", {"expected_version": 1})
    assert_code(response, 404, "NOT_FOUND")
    assert PreferenceRecord.objects.get().revoked_at is None


def test_export_downloads_the_users_preferences_and_history(as_user: Any) -> None:
    seed("alice", LANG, "de", run="run-a")
    seed("alice", LANG, "en", expected=1)
    seed("bob", LANG, "fr")
    response = as_user("alice").get("/preferences/export/")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == 'attachment; filename="preferences-alice.json"'
    body = json.loads(response.content)
    assert body["subject"] == "alice"
    assert [(r["key"], r["value"], r["version"]) for r in body["records"]] == [(LANG, "en", 2)]
    assert [(h["value"], h["version"], h["run_id"]) for h in body["history"]] == [
        ("de", 1, "run-a"),
        ("en", 2, None),
    ]
    assert "fr" not in response.content.decode()


def test_erase_with_the_wrong_text_erases_nothing(as_user: Any) -> None:
    seed("alice", LANG, "de")
    alice = as_user("alice")
    for typed in ("", "erase", "Alice", "alice "):
        response = alice.post("/preferences/erase/", {"typed": typed})
        assert_code(response, 400, "ERASE_CONFIRMATION_MISMATCH")
        assert "Type your user name" in response.content.decode()  # to try again, right there
    assert PreferenceRecord.objects.get().value == "de"
    assert PreferenceHistory.objects.get().value == "de"


def test_erase_with_the_user_name_erases_values_and_keeps_the_audit(as_user: Any) -> None:
    seed("alice", LANG, "de")
    seed("alice", LANG, "en", expected=1)
    seed("bob", LANG, "fr")
    alice = as_user("alice")
    assert "Type your user name" in alice.get("/preferences/erase/").content.decode()
    assert alice.post("/preferences/erase/", {"typed": "alice"})["Location"] == "/preferences/"
    assert list(PreferenceRecord.objects.values_list("subject", flat=True)) == ["bob"]
    kept = PreferenceHistory.objects.filter(subject="alice")
    assert set(kept.values_list("value", flat=True)) == {None}
    assert kept.get(action="erase").reason == "erased at the subject's request"
    assert "Erased 1 preference(s)" in alice.get("/preferences/").content.decode()


# ---- memory administration


@pytest.mark.parametrize("who", ["operator", "admin"])
def test_administration_searches_by_subject_and_key(as_user: Any, who: str) -> None:
    seed("alice", LANG, "de")
    seed("alice", STYLE, "inline")
    seed("albert", LANG, "it")
    seed("bob", LANG, "fr")
    client = as_user(who)
    page = client.get("/memory/", {"subject": "al", "key": LANG}).content.decode()
    rows = re.findall(r'<code class="pref-value">([^<]*)</code>', page)
    assert rows == ["it", "de"]  # albert before alice; citation_style and bob filtered out
    page = client.get("/memory/").content.decode()
    assert re.findall(r'<code class="pref-value">([^<]*)</code>', page) == [
        "it", "de", "inline", "fr",
    ]  # fmt: skip


def test_administration_pages_by_keyset(as_user: Any) -> None:
    PreferenceRecord.objects.bulk_create(
        PreferenceRecord(subject=f"u{i:03}", key=LANG, value="en", confirmation_id="c")
        for i in range(51)
    )
    client = as_user("operator")
    page = client.get("/memory/").content.decode()
    assert page.count('<code class="pref-value">') == 50
    assert "after_subject=u049&amp;after_key=answer_language" in page
    rest = client.get("/memory/", {"after_subject": "u049", "after_key": LANG}).content.decode()
    assert rest.count('<code class="pref-value">') == 1
    assert ">u050<" in rest
    assert "Next page" not in rest


def test_operator_revokes_with_a_reason_and_the_audit_trail_shows_it(as_user: Any) -> None:
    seed("alice", LANG, "de", run="run-1")
    operator = as_user("operator")
    url = f"/memory/alice/{LANG}/"
    response = operator.post(
        url + "revoke/", {"reason": "reported as abuse", "expected_version": 1}
    )
    assert response["Location"] == url
    record = PreferenceRecord.objects.get()
    assert record.revoked_at is not None
    assert record.revoked_by is not None
    row = PreferenceHistory.objects.get(action="revoke")
    assert (row.actor, row.reason, row.version) == ("otto", "reported as abuse", 1)
    page = operator.get(url).content.decode()
    audit = page[page.index("Audit trail") :]
    assert "reported as abuse" in audit
    assert "otto" in audit
    assert 'href="/runs/run-1/"' in audit
    # and alice sees who revoked hers, and why
    assert "by otto: reported as abuse" in as_user("alice").get("/preferences/").content.decode()


@pytest.mark.parametrize(
    ("data", "status", "code"),
    [
        ({"reason": "", "expected_version": 1}, 400, "VALIDATION_ERROR"),
        ({"reason": "   ", "expected_version": 1}, 400, "VALIDATION_ERROR"),
        ({"reason": "old", "expected_version": "x"}, 400, "VALIDATION_ERROR"),
        ({"reason": "stale", "expected_version": 7}, 409, "PREFERENCE_VERSION_CONFLICT"),
    ],
)
def test_administration_revoke_refusals(as_user: Any, data: Any, status: int, code: str) -> None:
    seed("alice", LANG, "de")
    response = as_user("operator").post(f"/memory/alice/{LANG}/revoke/", data)
    assert_code(response, status, code)
    assert PreferenceRecord.objects.get().revoked_at is None
    assert not PreferenceHistory.objects.filter(action="revoke").exists()


def test_an_unknown_entry_is_not_found(as_user: Any) -> None:
    operator = as_user("operator")
    assert_code(operator.get(f"/memory/nobody/{LANG}/"), 404, "NOT_FOUND")
    response = operator.post(
        f"/memory/nobody/{LANG}/revoke/", {"reason": "x", "expected_version": 1}
    )
    assert_code(response, 404, "NOT_FOUND")


# ---- query counts: the lists cost the same whatever their length


def _queries(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path).status_code == 200
    return len(queries)


def test_the_preferences_page_costs_the_same_for_a_long_history(as_user: Any) -> None:
    alice = as_user("alice")
    seed("alice", LANG, "de")
    short = _queries(alice, "/preferences/")
    for version, value in enumerate(["en", "fr", "es", "it", "nl", "pt"], start=1):
        seed("alice", LANG, value, expected=version)
    seed("alice", STYLE, "inline")
    assert _queries(alice, "/preferences/") == short


def test_the_administration_list_costs_the_same_for_many_entries(as_user: Any) -> None:
    operator = as_user("operator")
    seed("alice", LANG, "de")
    few = _queries(operator, "/memory/")
    for name in ("bob", "carol", "dave", "erin"):
        seed(name, LANG, "en")
        seed(name, STYLE, "inline")
    assert _queries(operator, "/memory/") == few
