"""A user's erase reaches every copy of their values (issue 9 item 11, issue 21 item 3).

The places are not listed here: they are ``runs.privacy.erasure_places.ERASED``, the list the erase
rewrites. The scenario (``erase_kit.alice_everywhere``) must fill every one of them, and the
erase must empty every one of them; a column dropped from the list is caught by
``test_each_column_of_the_list_is_needed``. Afterwards a search of every table of the database
finds the values only in another subject's run, which the erase did not touch. Hashes stay as
they were, for the audit.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from django.apps import apps
from django.db import transaction
from rest_framework.test import APIClient

from agentconsole import wiring
from memory.models import PreferenceHistory, PreferenceRecord, WorkingMemoryItem
from memory.services import preference_revoke, preferences_erase
from policy.domain.canonical import content_hash
from policy.models import Confirmation, ConfirmationApproval
from runs import models as m
from runs import selectors
from runs.domain import lifecycle
from runs.domain.errors import VersionConflict
from runs.privacy import erasure_places
from runs.trace.trace_checks import trace_verify
from tests.memory import erase_kit as kit
from tests.memory.erase_kit import CURRENT, ERASED
from tests.support.db_scan import Hit, scan
from tests.support.planner import tool_call

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("quoting_tool", "model_endpoint"),
]
quoting_tool = kit.quoting_tool
model_endpoint = kit.model_endpoint


def _owner(hit: Hit) -> str:
    """The run id (or subject) a row belongs to."""
    (model,) = [
        x for x in apps.get_models(include_auto_created=True) if x._meta.db_table == hit.table
    ]
    row: Any = model._base_manager.get(pk=hit.pk)
    if model is m.Run:
        return str(row.pk)
    if model is ConfirmationApproval:
        return str(row.confirmation.run_id)
    return str(getattr(row, "run_id", None) or getattr(row, "subject", "?"))


def _everywhere(
    alice: kit.Alice, places: tuple[erasure_places.Place, ...] = erasure_places.ERASED
) -> dict[str, list[str]]:
    """Every column of ``places`` -> the erased values alice's rows hold there."""
    return {
        erasure_places.column_name(place.model, column): kit.held(
            place, column, run_ids=alice.run_ids
        )
        for place in places
        for column in place.columns
    }


def _bobs_run() -> str:
    return kit.run("bob", [tool_call("p1", "search_public", {"query": f"{CURRENT} grammar"})])


def test_an_erase_leaves_the_values_in_no_table_but_another_subjects(users) -> None:
    """issue 21 item 3: before the fix an operator's decline reason, her approval reason, her
    revocation's reason, an artifact's path (and GET /api/confirmations/<id>/ with them) still
    held her values. issue 9 item 11: the goal, the answer, observations, ledger arguments,
    confirmation proposals, working memory, handoff bundles and trace details of her runs."""
    alice = kit.alice_everywhere(users)
    bobs = _bobs_run()
    assert m.Run.objects.get(pk=alice.runs["done"]).status == "completed"
    assert m.Run.objects.get(pk=alice.runs["waiting"]).status == "waiting_confirmation"
    # Every place the erase rewrites really holds a value before it (else the search after it
    # proves nothing): a place added to the list needs the scenario to fill it.
    empty = [column for column, held in _everywhere(alice).items() if not held]
    assert empty == [], "the scenario puts no value in these places"
    bob_before = selectors.run_export(run_id=bobs)
    hashes_before = _hashes(alice.runs["done"])

    assert preferences_erase(subject="alice", by=users["alice"]) == 1

    assert {c: held for c, held in _everywhere(alice).items() if held} == {}
    for value in ERASED:
        leftovers = [str(h) for h in scan(value) if _owner(h) not in (bobs, "bob")]
        assert leftovers == [], f"{value} survives the erase"
    _assert_api_shows_no_value(alice, users["operator"])
    # bob's run, holding the same value, is untouched.
    assert selectors.run_export(run_id=bobs) == bob_before
    assert CURRENT in m.Run.objects.get(pk=bobs).goal
    # The audit: every stored hash is as it was; the tombstones say where a value stood.
    done = alice.runs["done"]
    assert _hashes(done) == hashes_before
    assert "[erased:hmac-sha256:" in m.Run.objects.get(pk=done).goal
    assert set(
        PreferenceHistory.objects.filter(subject="alice").values_list("value", flat=True)
    ) == {None}
    # By design, re-hashing tombstoned content does not give the stored hash back.
    user_request = m.Observation.objects.get(run_id=done, observation_id="user-1")
    assert content_hash(user_request.content) != user_request.content_hash
    erased_events = m.TraceEvent.objects.filter(run_id=done, event="run.values-erased")
    assert [(e.details["by"], e.details["erased_events"] > 0) for e in erased_events] == [
        ("alice", True)
    ]
    # issue 23 item 5: her traces were rewritten, and their hash chains still verify (the
    # chain runs over the content digests the erase kept; its seal covers what it rewrote).
    rewritten = m.TraceEvent.objects.filter(run_id__in=alice.run_ids, erased_digest__isnull=False)
    assert rewritten.exists()
    verdicts = {r.pk: trace_verify(run=r).text for r in m.Run.objects.filter(subject="alice")}
    assert all(v.startswith("trace verifies") for v in verdicts.values()), verdicts


def _assert_api_shows_no_value(alice: kit.Alice, operator: Any) -> None:
    client = APIClient()
    client.force_authenticate(operator)
    shown = Confirmation.objects.filter(run_id__in=alice.run_ids)
    assert shown.filter(decision_reason__gt="").exists()  # the decline reason is among them
    for confirmation_id in shown.values_list("pk", flat=True):
        response = client.get(f"/api/confirmations/{confirmation_id}/")
        assert response.status_code == 200
        text = json.dumps(response.json(), ensure_ascii=False)
        assert [v for v in ERASED if v in text] == [], text


def test_each_column_of_the_list_is_needed(users, monkeypatch) -> None:
    """issue 21 item 3: dropping any one column from ``ERASED`` leaves her value in exactly
    that column (before, dropping ``LedgerEntry.outcome`` passed every test). Each erase runs
    in a savepoint that is rolled back, so one scenario serves every column."""
    alice = kit.alice_everywhere(users)
    every = erasure_places.ERASED
    unnoticed = {}
    for i, place in enumerate(every):
        for column in place.columns:
            with monkeypatch.context() as patch, transaction.atomic():
                patch.setattr(erasure_places, "ERASED", _without(every, i, column))
                preferences_erase(subject="alice", by=users["alice"])
                left = {c for c, held in _everywhere(alice, every).items() if held}
                transaction.set_rollback(True)
            name = erasure_places.column_name(place.model, column)
            if left != {name}:
                unnoticed[name] = left
    assert unnoticed == {}, "dropping these columns left values elsewhere or nowhere"


def _without(
    places: tuple[erasure_places.Place, ...], i: int, column: str
) -> tuple[erasure_places.Place, ...]:
    """``places`` with ``column`` taken out of the ``i``-th place."""
    kept = tuple(c for c in places[i].columns if c != column)
    return (*places[:i], dataclasses.replace(places[i], columns=kept), *places[i + 1 :])


def _hashes(run_id: str) -> dict[str, Any]:
    return {
        "observations": list(
            m.Observation.objects.filter(run_id=run_id).values_list(
                "observation_id", "content_hash"
            )
        ),
        "ledger": list(
            m.LedgerEntry.objects.filter(run_id=run_id).values_list(
                "idempotency_token", "arguments_hash", "proposal_hash"
            )
        ),
        "confirmations": list(
            Confirmation.objects.filter(run_id=run_id).values_list("pk", "proposal_hash")
        ),
        "trace": list(
            m.TraceEvent.objects.filter(run_id=run_id)
            .exclude(event="run.values-erased")  # the erase's own event is new
            .order_by("sequence")
            .values_list("sequence", "content_digest", "chain_digest")
        ),
    }


def test_a_reason_at_its_length_limit_is_erased_not_refused(users) -> None:
    """issue 21 item 3: a tag is longer than the value it replaces; a revocation's reason
    already at its 256-character limit must still be erased (PostgreSQL refused the longer
    text, and the whole erase with it)."""
    kit.write_alice_memory()
    reason = "x" * 200 + CURRENT + "y" * (56 - len(CURRENT))
    preference_revoke(subject="alice", key="answer_language", by=users["alice"], reason=reason)

    assert preferences_erase(subject="alice", by=users["alice"]) == 1

    (revoked,) = PreferenceHistory.objects.filter(subject="alice", action="revoke")
    assert CURRENT not in revoked.reason
    assert revoked.reason.startswith("x" * 200 + "[erased:hmac-sha256:")
    assert len(revoked.reason) == 256


def test_a_write_in_flight_cannot_bring_an_erased_value_back(users) -> None:
    """issue 9 item 11: a step decided on the run before the erase fails its compare-and-set;
    a confirmation approved after the erase approves the tombstone, never the value."""
    kit.write_alice_memory()
    kit.load_demo_corpus()
    waiting = kit.run("alice", [kit.save("p1", CURRENT, expected=2)])
    store = wiring.store()
    stale = lifecycle.request_cancel(store.load(waiting), by="t", reason="", active_tool=False)

    preferences_erase(subject="alice", by=users["alice"])

    with pytest.raises(VersionConflict):
        store.apply(stale)  # it would have written the old pending proposal back
    kit.decide(waiting, approved=True)
    assert not PreferenceRecord.objects.filter(subject="alice").exists()
    assert [str(h) for h in scan(CURRENT)] == []
    assert not WorkingMemoryItem.objects.filter(content__contains=CURRENT).exists()
