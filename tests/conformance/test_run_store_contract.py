"""The ``RunStore`` contract (runs.domain.ports), checked on both adapters.

``apply(commit)`` writes the whole commit iff the run is still at ``commit.expected_version``
and every conditional write in it still holds (an unused idempotency token, a ledger row still
open, a pending confirmation to decide, an approved one to consume, a grant with calls left);
otherwise it raises ``VersionConflict`` and writes nothing at all. A unique key broken although
the version matched (a minted id taken twice) is ``IntegrityViolation``, never a conflict.

Commits come from the real step functions. Where a conflict needs a writer that read before
someone else wrote, the test hands ``decide`` the grants, confirmations or lookups read earlier,
which is exactly what such a writer would have seen.
"""

from __future__ import annotations

from typing import Any

import pytest

from policy.domain.confirmation.confirmations import Confirmation, ConfirmationStatus
from policy.domain.errors import NotFound
from policy.domain.grants import CapabilityGrant, Constraint
from policy.domain.origins.taint import compact, entry_text, fold, normal
from policy.domain.outcomes import ToolOutcome
from runs.domain import lifecycle
from runs.domain.errors import IntegrityViolation, VersionConflict
from runs.domain.machine import Status
from runs.domain.step.commits import Commit
from runs.domain.trace_chain import GENESIS, verify
from tests.conformance.conformance_kit import (
    SUBJECT,
    Driver,
    MemoryAdapter,
    final,
    make_run,
    new_state,
    read,
    unknown,
    write,
    write_hash,
)


def conflicts_and_writes_nothing(d: Driver, commit: Commit) -> None:
    before = d.snapshot()
    with pytest.raises(VersionConflict):
        d.store.apply(commit)
    assert d.snapshot() == before


def test_create_then_load_round_trips(adapter: Any) -> None:
    run_id = "run_round_trip"
    state = new_state(run_id)
    grant = CapabilityGrant(
        grant_id=f"{run_id}:g1",
        capability="notes:read",
        run_id=run_id,
        resource_scope="*",
        expires_at_step=5,
        max_calls=3,
        constraints={"name": Constraint(prefix="retry")},
    )
    confirmation = Confirmation(
        confirmation_id=f"{run_id}:c0",
        run_id=run_id,
        proposal_hash=write_hash("hello"),
        status=ConfirmationStatus.APPROVED,
        expires_at_step=5,
    )
    planner = {"kind": "fixture", "outputs": [read("p1", "retry")]}

    created = adapter.store.create(
        state, grants=[grant], confirmations=[confirmation], planner=planner
    )

    assert created == state
    assert adapter.store.load(run_id) == state
    assert adapter.store.grants(run_id) == [grant]
    assert adapter.store.confirmations(run_id) == [confirmation]
    assert adapter.store.planner_config(run_id) == planner
    assert adapter.store.recent_observations(run_id, 5) == []
    assert adapter.store.active_tool(run_id) is False
    with pytest.raises(NotFound):
        adapter.store.load("run_missing")


def test_apply_bumps_the_version_and_numbers_the_trace_contiguously(adapter: Any) -> None:
    d = make_run(adapter, [read("p1", "retry"), unknown("p2", "a"), final("Three.", ["tool-1"])])
    builders = [
        lambda: lifecycle.start(d.load()),
        lambda: d.plan(),  # read_note: ledger intent
        lambda: d.settle(d.commits[-1].command),  # its outcome: an observation
        lambda: d.plan(),  # an unknown tool: rejected, a policy observation
        lambda: d.plan(),  # the final answer
    ]
    names: list[str] = []
    for version, build in enumerate(builders, start=1):
        commit = build()
        assert commit.expected_version == version - 1
        assert commit.events, "every step records something"

        applied = d.apply(commit)

        names += [e.event for e in commit.events]
        assert applied.version == version
        assert applied.trace_seq == len(names)
        assert d.load() == applied
        assert adapter.events(d.run_id) == list(enumerate(names, start=1))

    assert d.load().status is Status.COMPLETED


def test_each_commit_extends_the_trace_chain_from_the_runs_head(adapter: Any) -> None:
    """issue 23 item 5: every commit links its events after the head of the state it was
    decided on; the run's head is its last event's chain digest and the chain verifies."""
    d = make_run(adapter, [read("p1", "retry"), final("Three.", ["tool-1"])])
    assert d.load().trace_head == GENESIS
    for build in (lambda: lifecycle.start(d.load()), d.plan):
        before = d.load()
        applied = d.apply(build())
        rows = adapter.chain(d.run_id)
        assert rows[-1].chain_digest == applied.trace_head != before.trace_head
        verdict = verify(d.run_id, applied.trace_head, applied.trace_seq, rows)
        assert (verdict.status, verdict.events) == ("verified", applied.trace_seq)


def _stale_intent(d: Driver) -> tuple[Commit, Commit]:
    running = d.load()
    return d.propose(running, read("p1", "retry")), d.propose(running, unknown("p9", "x"))


def _stale_settle(d: Driver) -> tuple[Commit, Commit]:
    intent = d.plan()
    d.apply(intent)
    busy = d.load()
    cancel = lifecycle.request_cancel(busy, by="operator", reason="stop", active_tool=True)
    return d.settle(intent.command, state=busy), cancel


def _stale_confirmation_request(d: Driver) -> tuple[Commit, Commit]:
    running = d.load()
    return d.propose(running, write("p1", "hello")), d.propose(running, unknown("p9", "x"))


def _stale_confirmation_decision(d: Driver) -> tuple[Commit, Commit]:
    d.apply(d.propose(d.load(), write("p1", "hello")))
    waiting = d.load()
    assert waiting.status is Status.WAITING_CONFIRMATION
    approve = lifecycle.decide_confirmation(
        waiting, confirmation_id=waiting.pending_confirmation_id, approved=True, by="reviewer"
    )
    cancel = lifecycle.request_cancel(waiting, by="operator", reason="stop", active_tool=False)
    return approve, cancel


def _stale_consume(d: Driver) -> tuple[Commit, Commit]:
    running = d.load()
    return d.propose(running, write("p1", "approved")), d.propose(running, unknown("p9", "x"))


STALE_CASES = {
    "ledger-intent-and-grant-use": (_stale_intent, ("events", "ledger_intent", "grant_uses")),
    "ledger-outcome-and-observation": (_stale_settle, ("events", "observations", "ledger_settle")),
    "confirmation-request": (_stale_confirmation_request, ("events", "confirmation_request")),
    "confirmation-decision": (_stale_confirmation_decision, ("events", "confirmation_decision")),
    "confirmation-consumption": (
        _stale_consume,
        ("events", "ledger_intent", "consume_confirmation"),
    ),
}


@pytest.mark.parametrize("case", list(STALE_CASES))
def test_a_stale_expected_version_conflicts_and_writes_nothing(adapter: Any, case: str) -> None:
    d = make_run(adapter, [read("p1", "retry")], approved_texts=["approved"])
    d.start()
    build, carried = STALE_CASES[case]
    stale, other = build(d)
    # The stale commit really carries writes of each kind, so "nothing written" means something.
    for name in carried:
        assert getattr(stale, name), name
    d.apply(other)  # another writer moves the run first, from the same version

    conflicts_and_writes_nothing(d, stale)


class _BeforeTheIntent:
    """Lookups as a writer saw them before the first intent committed."""

    def __init__(self, lookups: Any) -> None:
        self.lookups = lookups

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lookups, name)

    def ledger_has(self, idempotency_token: str) -> bool:
        return False


def test_a_second_intent_with_a_used_idempotency_token_is_an_integrity_violation(
    adapter: Any,
) -> None:
    """issue 9 item 4: a unique key broken at the current version is not a lost race: a stable
    IntegrityViolation (never retried as a VersionConflict), and nothing is written."""
    d = make_run(adapter, [read("p1", "retry")])
    d.start()
    first, _ = d.execute_next()
    token = first.command.idempotency_token
    assert d.store.lookups(d.run_id).ledger_has(token)

    # Same run, proposal id and arguments: the same token, at the current version.
    again = d.propose(
        d.load(), read("p1", "retry"), lookups=_BeforeTheIntent(d.store.lookups(d.run_id))
    )
    assert again.command is not None
    assert again.command.idempotency_token == token

    before = d.snapshot()
    with pytest.raises(IntegrityViolation) as raised:
        d.store.apply(again)
    assert not isinstance(raised.value, VersionConflict)
    assert raised.value.code == "STORE_INTEGRITY_VIOLATION"
    assert d.snapshot() == before
    assert d.snapshot()["ledger"] == {token: ("succeeded", 1)}


def test_settling_a_ledger_row_twice_conflicts(adapter: Any) -> None:
    d = make_run(adapter, [read("p1", "retry"), unknown("p2", "a")])
    d.start()
    intent, _ = d.execute_next()
    d.apply(d.plan())  # a later step, so the second outcome's observation id is a new one

    second = d.settle(intent.command, ToolOutcome.failed("LATE", "late answer", retryable=False))
    assert second.ledger_settle is not None

    conflicts_and_writes_nothing(d, second)
    assert d.snapshot()["ledger"] == {intent.command.idempotency_token: ("succeeded", 1)}


@pytest.mark.parametrize("which", ["approved", "missing"])
def test_a_decision_on_a_confirmation_that_is_not_pending_conflicts(
    adapter: Any, which: str
) -> None:
    d = make_run(adapter, [write("p1", "hello")], approved_texts=["approved"])
    d.start()
    d.apply(d.plan())
    waiting = d.load()
    assert waiting.status is Status.WAITING_CONFIRMATION
    target = f"{d.run_id}:approved1" if which == "approved" else f"{d.run_id}:nope"

    decision = lifecycle.decide_confirmation(
        waiting, confirmation_id=target, approved=False, by="reviewer"
    )

    conflicts_and_writes_nothing(d, decision)
    statuses = d.snapshot()["confirmations"]
    assert statuses == {
        f"{d.run_id}:approved1": "approved",
        waiting.pending_confirmation_id: "pending",
    }


def test_consuming_a_confirmation_twice_conflicts(adapter: Any) -> None:
    d = make_run(
        adapter, [write("p1", "approved"), write("p2", "approved")], approved_texts=["approved"]
    )
    d.start()
    cid = f"{d.run_id}:approved1"
    approved_read = d.store.confirmations(d.run_id)
    first, _ = d.execute_next()
    assert first.consume_confirmation == cid
    assert d.snapshot()["confirmations"] == {cid: "consumed"}
    assert not [
        c for c in d.store.confirmations(d.run_id) if c.status is ConfirmationStatus.APPROVED
    ]

    # p2 is the same call under a new proposal id, decided on the confirmations read before
    # p1 consumed the approval.
    second = d.plan(confirmations=approved_read)
    assert second.consume_confirmation == cid
    assert second.command.idempotency_token != first.command.idempotency_token

    conflicts_and_writes_nothing(d, second)


def test_grant_uses_count_calls_and_are_refused_past_max_calls(adapter: Any) -> None:
    outputs = [read("p1", "a"), read("p2", "b"), read("p3", "c"), read("p4", "d")]
    d = make_run(adapter, outputs, read_max_calls=2)
    d.start()
    g1 = f"{d.run_id}:g1"

    def calls_used() -> int:
        return dict(d.snapshot()["grants"])[g1]

    d.execute_next()
    assert calls_used() == 1
    one_call_left = d.store.grants(d.run_id)
    d.execute_next()
    assert calls_used() == 2

    # Fresh grants: the gate refuses the third call itself.
    refused = d.plan()
    assert refused.command is None
    assert "CAPABILITY_CALLS_EXHAUSTED" in str([e.details for e in refused.events])
    # Grants read before the second call: the gate issues a command, the store refuses its use.
    late = d.plan(grants=one_call_left)
    assert late.grant_uses == (g1,)

    conflicts_and_writes_nothing(d, late)
    assert calls_used() == 2


def test_lookups_answer_from_this_run_only(adapter: Any) -> None:
    d = make_run(adapter, [read("p1", "retry"), unknown("p2", "a")])
    other = make_run(adapter, [read("p1", "retry")])
    d.start()
    other.start()
    intent, outcome = d.execute_next()
    d.apply(d.plan())
    tool_obs = outcome.observations[0]
    assert tool_obs.observation_id == "tool-1"
    lookups = d.store.lookups(d.run_id)
    elsewhere = other.store.lookups(other.run_id)
    ids = {"user-1", "tool-1", "policy-2", "missing-9"}

    assert lookups.seen_content(tool_obs.content_hash) is True
    assert lookups.seen_content("0" * 64) is False
    assert elsewhere.seen_content(tool_obs.content_hash) is False
    assert dict(lookups.trust_of(ids)) == {
        "user-1": "user",
        "tool-1": "untrusted-content",
        "policy-2": "policy",
    }
    assert dict(lookups.trust_of([])) == {}
    assert dict(elsewhere.trust_of({"tool-1", "policy-2"})) == {}
    assert set(lookups.citable(ids)) == {"tool-1"}
    assert set(elsewhere.citable(ids)) == set()
    assert lookups.ledger_has(intent.command.idempotency_token) is True
    assert lookups.ledger_has("f" * 64) is False


def test_active_tool_is_true_exactly_while_a_ledger_row_is_started(adapter: Any) -> None:
    d = make_run(adapter, [read("p1", "retry")])
    other = make_run(adapter)
    d.start()
    assert d.store.active_tool(d.run_id) is False

    intent = d.plan()
    d.apply(intent)
    assert d.store.active_tool(d.run_id) is True
    assert d.store.active_tool(other.run_id) is False

    d.apply(d.settle(intent.command))
    assert d.store.active_tool(d.run_id) is False


def test_recent_observations_are_the_newest_n_oldest_first(adapter: Any) -> None:
    d = make_run(adapter, [unknown("p1", "a"), read("p2", "retry"), unknown("p3", "b")])
    other = make_run(adapter)
    d.start()
    other.start()
    d.apply(d.plan())
    d.execute_next()
    d.apply(d.plan())
    written = [o for c in d.commits for o in c.observations]
    assert [o.observation_id for o in written] == ["user-1", "policy-1", "tool-2", "policy-3"]

    assert d.store.recent_observations(d.run_id, 3) == written[-3:]
    assert d.store.recent_observations(d.run_id, 1) == written[-1:]
    assert d.store.recent_observations(d.run_id, 10) == written
    assert [o.observation_id for o in other.store.recent_observations(other.run_id, 10)] == [
        "user-1"
    ]
    assert d.load().subject == SUBJECT


def test_a_confirmation_request_on_a_taken_id_is_an_integrity_violation(adapter: Any) -> None:
    """issue 9 item 4: the runtime's confirmation request lands on an id already taken (the old
    collision of a caller's "c1" with the runtime's own, forced here past the services'
    validation): IntegrityViolation, not a conflict, and nothing is written."""
    from runs.domain.ids import minted_confirmation_id

    d = make_run(adapter, [write("p1", "hello")])
    taken = Confirmation(
        confirmation_id=minted_confirmation_id(d.run_id, 1),
        run_id=d.run_id,
        proposal_hash=write_hash("something else"),
        status=ConfirmationStatus.APPROVED,
        expires_at_step=50,
    )
    d.start()
    # Planted under the store, as a naming bug would leave it.
    if isinstance(adapter, MemoryAdapter):
        adapter.store._confirmations[d.run_id][taken.confirmation_id] = taken
    else:
        from policy.models import Confirmation as ConfirmationRow

        ConfirmationRow.objects.create(
            id=taken.confirmation_id,
            run_id=d.run_id,
            proposal_hash=taken.proposal_hash,
            status="approved",
            expires_at_step=50,
        )
    asks = d.plan()
    assert asks.confirmation_request is not None
    assert asks.confirmation_request.confirmation_id == taken.confirmation_id

    before = d.snapshot()
    with pytest.raises(IntegrityViolation) as raised:
        d.store.apply(asks)
    assert not isinstance(raised.value, VersionConflict)
    assert d.snapshot() == before


def test_the_tool_policy_is_recorded_once_and_the_provenance_index_is_answered(
    adapter: Any,
) -> None:
    """issue 12 item 3: a run keeps the policy it was created with (no step rewrites it).
    issue 23 item 2: both stores keep the run's provenance index the same way, written with
    the observation it indexes, and sticky: it still holds a result long after the result left
    the planner's view."""
    policy = {"write_note": {"confirmation": "when_untrusted"}}
    state = new_state("run_policy").model_copy(update={"tool_policy": policy})
    adapter.store.create(state, grants=[], confirmations=[], planner={"kind": "fixture"})
    assert adapter.store.load("run_policy").tool_policy == policy

    d = make_run(adapter, [read("p1", "retry-rule"), read("p2", "other-rule")])
    d.start()
    lookups = d.store.lookups(d.run_id)

    def origins(value: str) -> set[str]:
        index = lookups.taint_index()
        spaced = fold(normal(value))
        return index.untrusted.origins(spaced, compact(spaced))

    assert origins("note retry-rule") == set()
    d.execute_next()  # read_note's output is untrusted content: tool-1
    assert origins("note retry-rule") == {"tool-1"}
    d.execute_next()
    assert origins("NOTE  other-rule") == {"tool-2"}
    # Long after both left the planner's view, the index still answers.
    later = d.store.working_view(d.run_id, d.load().step + 20)
    assert [i.item_id for i in later] == ["wm-user-1"]
    assert origins("note retry-rule") == {"tool-1"}
    assert d.load().taint_chars == len(entry_text({"text": "note retry-rule"})) + len(
        entry_text({"text": "note other-rule"})
    )
    assert d.load().tool_policy == {}
