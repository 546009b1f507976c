"""The demo `make run` loads (issue 11, "Demo"): every state the console shows, exactly once,
made by the real runner; loading twice makes nothing new; the waiting run's proposal cites the
poisoned forum post, and an operator's approval lets a real worker finish it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from agentconsole import wiring
from memory.models import PreferenceHistory, PreferenceRecord
from policy import provenance_selectors
from policy.models import Confirmation
from runs import models as m
from runs import selectors, services
from runs.demo.demo_runs import DEMO_RUNS, waiting_deadline_ms
from runs.domain.clock import SYSTEM_CLOCK
from runs.tools import demo_notice, demo_partner
from tests.workers.test_worker_runs import wait_until

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# key → (owner, status, stop reason, open handoff reason or None)
EXPECTED = {
    "waiting": ("alice", "waiting_confirmation", "USER_CONFIRMATION_REQUIRED", None),
    "blocked": ("alice", "completed", "FINAL_ANSWER_VALIDATED", None),
    "history": ("alice", "completed", "FINAL_ANSWER_VALIDATED", None),
    "loop": ("alice", "failed", "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION",
             "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"),
    "cancelled": ("alice", "cancelled", "CANCELLED", None),
    "unknown": ("bob", "failed", "TOOL_OUTCOME_UNKNOWN", "TOOL_OUTCOME_UNKNOWN"),
    "research": ("bob", "completed", "FINAL_ANSWER_VALIDATED", None),
    "four-eyes": ("bob", "waiting_confirmation", "USER_CONFIRMATION_REQUIRED", None),
}  # fmt: skip


@pytest.fixture
def demo(settings: Any, tmp_path: Path) -> Iterator[dict[str, m.Run]]:
    """load_demo twice, as `make run` on a development setup (DEBUG on: the demo tool is
    registered); the demo runs by key."""
    settings.DEBUG = True
    settings.BASE_DIR = tmp_path  # var/demo-logins.txt: not the checkout's own file
    wiring.registry.cache_clear()
    try:
        for _ in range(2):
            call_command("load_demo", stdout=io.StringIO())
        yield _by_key()
    finally:
        wiring.registry.cache_clear()


def _by_key() -> dict[str, m.Run]:
    out = {}
    for d in DEMO_RUNS:
        goal = d.scenario()["goal"]
        [run] = m.Run.objects.filter(goal=goal)  # exactly one, after two loads
        out[d.key] = run
    return out


def test_every_demo_state_exists_exactly_once(demo: dict[str, m.Run]) -> None:
    assert m.Run.objects.count() == len(EXPECTED)
    for key, (owner, status, stop_reason, handoff) in EXPECTED.items():
        run = demo[key]
        assert (run.owner.username, run.status, run.stop_reason) == (owner, status, stop_reason)
        open_handoffs = list(run.handoffs.values_list("reason", flat=True))
        assert open_handoffs == ([handoff] if handoff else []), key
    # The unknown effect: one ledger row in `unknown`, its token in the reviewer's bundle.
    [row] = demo["unknown"].ledger.all()
    assert (row.tool_name, row.status) == (demo_partner.NAME, "unknown")
    assert row.idempotency_token in str(demo["unknown"].handoffs.get().bundle)


def test_the_four_eyes_run_waits_for_two_people(demo: dict[str, m.Run]) -> None:
    """The console's four-eyes item (DEBUG-only ``publish_notice``): its rule is on the row."""
    pending = Confirmation.objects.get(pk=demo["four-eyes"].pending_confirmation_id)
    assert (pending.tool_name, pending.status, pending.approvers) == (
        demo_notice.NAME,
        "pending",
        "four_eyes",
    )
    assert not demo["four-eyes"].ledger.exists()  # nothing ran before two people approved


def test_the_blocked_run_rejected_the_injected_write(demo: dict[str, m.Run]) -> None:
    trace = selectors.run_export(run_id=demo["blocked"].pk)["trace"]
    rejected = [e["details"]["code"] for e in trace if e["event"] == "proposal.rejected"]
    assert rejected == ["MEMORY_KEY_NOT_ALLOWED"]
    assert not demo["blocked"].ledger.filter(tool_name="save_preference").exists()
    assert not PreferenceRecord.objects.filter(key="auto_approve").exists()


def test_a_preference_has_a_history_of_three_versions(demo: dict[str, m.Run]) -> None:
    history = PreferenceHistory.objects.filter(subject="alice", key="citation_style")
    assert list(history.order_by("version").values_list("version", "value")) == [
        (1, "inline"), (2, "footnote"), (3, "endnote"),
    ]  # fmt: skip
    record = PreferenceRecord.objects.get(subject="alice", key="citation_style")
    assert (record.value, record.version) == ("endnote", 3)


def test_each_user_sees_only_their_own_demo_runs(demo: dict[str, m.Run]) -> None:
    users = get_user_model().objects
    for name in ("alice", "bob"):
        visible = set(selectors.runs_visible(user=users.get(username=name)))
        assert visible == {r for r in demo.values() if r.owner.username == name}
    assert len(set(selectors.runs_visible(user=users.get(username="operator")))) == len(demo)


def test_the_waiting_run_cites_the_poisoned_post_and_does_not_expire_soon(
    demo: dict[str, m.Run],
) -> None:
    run = demo["waiting"]
    pending = Confirmation.objects.get(pk=run.pending_confirmation_id)
    assert pending.status == "pending"
    assert pending.proposal["arguments"] == {"key": "answer_language", "value": "zh-CN"}
    provenance = provenance_selectors.confirmation_provenance(
        pending,
        recorded=selectors.recorded_provenance,
        observations=selectors.cited_observations,
    )
    assert provenance["cited"] == [{"observation_id": "tool-1", "trust": "untrusted-content"}]
    tool_1 = run.observations.get(observation_id="tool-1")
    assert "save_preference" in str(tool_1.content)  # the forum post's injected instruction
    # A waiting run is cancelled at its deadline: the demo's is the longest allowed (a day).
    assert run.deadline_ms - SYSTEM_CLOCK.now_ms() > waiting_deadline_ms() - 600_000
    assert waiting_deadline_ms() >= 24 * 3600 * 1000
    assert not PreferenceRecord.objects.filter(subject="alice", key="answer_language").exists()


def test_an_operator_approves_and_a_worker_completes_the_waiting_run(
    demo: dict[str, m.Run], celery_worker: Any
) -> None:
    run = demo["waiting"]
    pending = Confirmation.objects.get(pk=run.pending_confirmation_id)
    operator = get_user_model().objects.get(username="operator")
    services.confirmation_decide(
        confirmation_id=pending.pk,
        approved=True,
        shown_hash=pending.proposal_hash,
        by=operator,
        enqueue=True,
    )
    assert wait_until(celery_worker, [run.pk]) == {run.pk: "completed"}
    record = PreferenceRecord.objects.get(subject="alice", key="answer_language")
    assert (record.value, record.version) == ("zh-CN", 1)
    # Loading again after the approval makes no new waiting run: a person decided this one.
    call_command("load_demo", stdout=io.StringIO())
    assert m.Run.objects.count() == len(EXPECTED)


def test_a_waiting_run_cancelled_at_its_deadline_is_made_again(demo: dict[str, m.Run]) -> None:
    """The sweeper cancels a waiting run at its deadline; the next load makes a new one, so the
    queue is not empty on a machine started again days later."""
    old = demo["waiting"]
    services.run_cancel(run_id=old.pk, by="sweeper", reason="deadline")
    call_command("load_demo", stdout=io.StringIO())
    goal = old.goal
    statuses = sorted(m.Run.objects.filter(goal=goal).values_list("status", flat=True))
    assert statuses == ["cancelled", "waiting_confirmation"]
    assert m.Run.objects.count() == len(EXPECTED) + 1
