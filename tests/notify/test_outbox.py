"""The outbox row of a notification commits with the item it announces (issue 24 item 4): a
confirmation or handoff that rolls back leaves no row; one that commits always has exactly one,
naming the item, its run, the tool, the run's profile and the roles that act on it.

Personas: ``alice`` (user) owns the runs.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from agentconsole import wiring
from notify import tasks as notify_tasks
from notify.models import Notification
from policy.models import Confirmation
from runs import models as m
from runs.domain.errors import IntegrityViolation
from runs.domain.step.commits import Commit, ConfirmationRequest
from tests.notify import notify_kit as kit
from tests.support.handoffs import handoff_run
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db


class Boom(Exception):
    pass


@pytest.fixture(autouse=True)
def rings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The doorbell after commit, recorded instead of sent to a broker."""
    rang: list[str] = []
    monkeypatch.setattr(notify_tasks, "enqueue_deliver", lambda: rang.append("deliver"))
    return rang


@pytest.fixture
def alice() -> Any:
    return make_user("alice", "user")


def test_the_confirmation_commit_writes_its_outbox_row(alice: Any) -> None:
    waiting = kit.waiting_run(alice, profile="research")
    (row,) = Notification.objects.all()
    assert (row.kind, row.item_id, row.run_id) == (
        "confirmation.waiting", waiting.confirmation_id, waiting.run_id,
    )  # fmt: skip
    assert (row.tool_name, row.profile, row.link_path) == (
        "save_preference", "research", f"/runs/{waiting.run_id}/",
    )  # fmt: skip
    assert row.roles == ["operator", "user"]  # owner_or_operator: the owner or an operator
    assert row.fanned_out_at is None
    # Its run's profile came from the run row, in the same INSERT.
    assert m.Run.objects.get(pk=waiting.run_id).profile.name == "research"


def test_a_rolled_back_commit_leaves_no_outbox_row(alice: Any) -> None:
    seen: list[int] = []

    def then_fail() -> None:
        with transaction.atomic():
            waiting = kit.waiting_run(alice)
            # Written inside the transaction that wrote the confirmation ...
            seen.append(Notification.objects.filter(item_id=waiting.confirmation_id).count())
            raise Boom

    with pytest.raises(Boom):
        then_fail()
    assert seen == [1]
    # ... and gone with it.
    assert not Confirmation.objects.exists()
    assert not Notification.objects.exists()


def test_a_commit_that_fails_after_its_outbox_row_leaves_none(alice: Any) -> None:
    """The run store's own commit: a confirmation request and a second handoff for a run whose
    handoff is still open. The confirmation and its outbox row are written first, then the
    handoff breaks ``handoff_one_open_per_run``: the whole commit rolls back, outbox row too."""
    handed = handoff_run(alice)
    store = wiring.store()
    state = store.load(handed.run_id)
    cid = f"{handed.run_id}:c-race"
    request = ConfirmationRequest(
        confirmation_id=cid, proposal_hash="0" * 64, tool_name="save_preference",
        tool_version="1", proposal={}, expires_at_step=10, cites_untrusted=False,
    )  # fmt: skip
    commit = Commit(
        expected_version=state.version,
        state=state.model_copy(update={"version": state.version + 1}),
        confirmation_request=request,
        handoff_reason="TEST_SECOND_HANDOFF",
    )
    before = list(Notification.objects.values_list("item_id", flat=True))
    with pytest.raises(IntegrityViolation):
        store.apply(commit)
    assert list(Notification.objects.values_list("item_id", flat=True)) == before
    assert not Confirmation.objects.filter(pk=cid).exists()


def test_the_doorbell_rings_only_after_the_commit(
    alice: Any, rings: list[str], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        kit.waiting_run(alice)
    assert rings == []  # nothing sent while the transaction was open
    for callback in callbacks:
        callback()
    assert rings == ["deliver"]


def test_a_handoff_commit_writes_its_outbox_row(alice: Any) -> None:
    """A run handed to a person (its step budget ran out) announces the handoff to reviewers,
    with a link to the bundle; no profile (a scenario run)."""
    handed = handoff_run(alice)
    (row,) = Notification.objects.filter(kind="handoff.opened")
    assert (row.item_id, row.run_id, row.roles, row.tool_name, row.profile) == (
        str(handed.handoff_id), handed.run_id, ["reviewer"], "", "",
    )  # fmt: skip
    assert row.link_path == f"/handoffs/{handed.handoff_id}/"
