"""Issue 9, "also thin": a loop stop (seed §8, §14, §16 experiment two) opens a handoff bundle
that names the repeated proposal, checked at the services level without a worker."""

from __future__ import annotations

import pytest

from policy.domain.canonical import proposal_hash
from runs import models as m
from runs import services
from runs.domain.handoff import FORBIDDEN_AUTOMATIC_ACTIONS
from runs.domain.machine import Status
from tests.services.services_kit import create_run, search

pytestmark = pytest.mark.django_db(transaction=True)

REASON = "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"


@pytest.fixture(autouse=True)
def _corpus(transactional_db: None) -> None:
    from runs.tools.corpus import demo_corpus_dir, document_load

    for path in sorted(demo_corpus_dir().glob("*.md")):
        document_load(path=path)


def test_a_loop_stop_hands_off_a_bundle_naming_the_repeated_proposal():
    """issue 9 (also thin): the bundle holds the repeated proposal and its hash (the loop
    fingerprint), the reason, and seed §14's recommended and forbidden actions."""
    outputs = [search(f"p{i}", "retry policy quarantine") for i in range(1, 6)]
    state = create_run(outputs, max_steps=8, max_tool_calls=8)

    done = services.run_advance(run_id=state.run_id)

    assert (done.status, done.stop_reason) == (Status.FAILED, REASON)
    (loop,) = m.TraceEvent.objects.filter(run_id=state.run_id, event="proposal.loop-detected")
    repeated_pid = loop.proposal_id
    # The fingerprint hashes the arguments as the tool would get them (the corpus default
    # filled in), so a respelled proposal is still the same repeat.
    expected_hash = proposal_hash(
        "search_public", "1", {"query": "retry policy quarantine", "corpus": "public"}
    )
    assert loop.details["fingerprint"] == expected_hash

    (handoff,) = m.Handoff.objects.filter(run_id=state.run_id)
    bundle = handoff.bundle
    assert handoff.reason == bundle["reason"] == REASON
    # The proposal that repeated, as the planner sent it, and its loop fingerprint.
    assert bundle["repeated_proposal_hash"] == expected_hash
    pending = bundle["pending_proposal"]
    assert pending["proposal_id"] == repeated_pid
    assert (pending["tool_name"], pending["tool_version"]) == ("search_public", "1")
    assert pending["arguments"] == {"query": "retry policy quarantine"}
    # The last observation the repeats produced nothing new beyond.
    assert bundle["last_trusted_observations"]
    assert (bundle["run_id"], bundle["status"]) == (state.run_id, "failed")
    # seed §14: what a person may do (commands into the state machine) and what no automation
    # may do; seed §15: a loop is never fed back to the planner again.
    assert bundle["recommended_safe_actions"] == [
        "read the repeated proposal and the last observation",
        "start a new run with a clearer goal or other grants",
    ]
    assert set(FORBIDDEN_AUTOMATIC_ACTIONS) <= set(bundle["forbidden_automatic_actions"])
    assert (
        "send the same proposal or error back to the planner"
        in (bundle["forbidden_automatic_actions"])
    )
