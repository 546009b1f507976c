"""Issue 9 item 4: ids the runtime mints never collide with ids a caller gives.

A scenario names its confirmations ("c1"); the runtime names the confirmations it asks for. The
two used to meet in one key space (``<run>:c1`` both), so the runtime's insert failed, the store
took the IntegrityError for a version conflict, the runner retried it 50 times and the run was
left in ``running``.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from policy.domain.errors import DomainError, ParseError
from policy.domain.proposals import parse_planner_output
from policy.models import Confirmation
from policy.models import Confirmation as ConfirmationRow
from runs import services
from runs.domain.errors import IntegrityViolation
from runs.domain.ids import MINTED_MARK, minted_confirmation_id
from runs.domain.machine import Status
from runs.models import Handoff, Run
from runs.orm.store import OrmRunStore
from runs.start.scenarios import ScenarioError, parse_scenario
from tests.services.services_kit import MEMORY_GRANT, create_run, save_language
from tests.support.runs import bare_run

pytestmark = pytest.mark.django_db(transaction=True)


def test_scenario_confirmation_c1_does_not_collide_with_the_runtimes_own(run_scenario):
    """issue 9 item 4: a scenario confirmation "c1" and the runtime's step-1 request coexist."""
    result = run_scenario("id-confirmation-c1")

    assert result.status == "waiting_confirmation"
    assert result.stop_reason == "USER_CONFIRMATION_REQUIRED"
    (given,) = [c for c in result.confirmations if c["origin"] == "scenario"]
    (asked,) = [c for c in result.confirmations if c["origin"] == "runtime"]
    assert given["id"] != asked["id"]
    assert given["status"] == "approved"
    assert asked["status"] == "pending"
    assert (
        result.events("proposal.waiting-confirmation")[0]["details"]["confirmation_id"]
        == (asked["id"])
    )
    assert Confirmation.objects.filter(run_id=result.run_id).count() == 2


# --- the class: every id an input may carry is kept out of the minted namespace -------------

MARKED = f"c1{MINTED_MARK}x"


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "tool", "proposal_id": MARKED, "tool_name": "t", "tool_version": "1"},
        {"kind": "tool", "proposal_id": "p1", "tool_name": "t", "tool_version": "1",
         "source_observation_ids": [MARKED]},
        {"kind": "final", "proposal_id": MARKED, "answer": "a"},
        {"kind": "final", "answer": "a", "citation_observation_ids": [MARKED]},
    ],
)  # fmt: skip
@pytest.mark.django_db(transaction=False)
def test_no_planner_id_can_carry_the_minted_mark(raw):
    """issue 9 item 4: planner-supplied ids (proposal ids, cited observation ids) never hold
    the mark that every minted confirmation id carries."""
    with pytest.raises(ParseError):
        parse_planner_output(raw)


@pytest.mark.django_db(transaction=False)
def test_a_scenario_confirmation_id_cannot_carry_the_minted_mark():
    """issue 9 item 4: a scenario cannot name a confirmation in the runtime's namespace."""
    text = json.dumps(
        {
            "subject": "alice",
            "goal": "g",
            "planner": [],
            "confirmations": [
                {
                    "confirmation_id": MARKED,
                    "proposal": {"tool_name": "t", "tool_version": "1", "arguments": {}},
                    "approved": True,
                    "expires_at_step": 1,
                }
            ],
        }
    )
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(text)
    assert raised.value.code == "SCENARIO_INVALID"


@pytest.mark.parametrize("name", [MARKED, "", "a b", 7, "x" * 65])
def test_run_create_refuses_a_confirmation_name_outside_the_input_namespace(name):
    """issue 9 item 4: the service checks too (a Python caller skips the scenario schema)."""
    proposal = {"tool_name": "save_preference", "tool_version": "1", "arguments": {}}
    with pytest.raises(DomainError) as raised:
        bare_run(
            confirmations=[
                {"confirmation_id": name, "proposal": proposal, "approved": True,
                 "expires_at_step": 1}
            ],
        )  # fmt: skip
    assert raised.value.code == "CONFIRMATION_ID_INVALID"
    assert Run.objects.count() == 0


def test_a_minted_id_clash_fails_the_run_once_and_is_never_retried(monkeypatch):
    """issue 9 item 4: if a minted id ever clashed again (planted here under the services), the
    store reports STORE_INTEGRITY_VIOLATION once — no conflict retries — and the run fails with
    a handoff instead of staying in running."""
    state = create_run([save_language("p1", "zh-CN")], [MEMORY_GRANT])
    ConfirmationRow.objects.create(
        id=minted_confirmation_id(state.run_id, 1),
        run_id=state.run_id,
        proposal_hash="0" * 64,
        status="approved",
        expires_at_step=10,
    )
    violations = []
    real_apply = OrmRunStore.apply

    def counting_apply(self, commit, **kwargs):
        try:
            return real_apply(self, commit, **kwargs)
        except IntegrityViolation as exc:
            violations.append(exc)
            raise

    monkeypatch.setattr(OrmRunStore, "apply", counting_apply)

    final = services.run_advance(run_id=state.run_id)

    assert len(violations) == 1
    assert violations[0].code == "STORE_INTEGRITY_VIOLATION"
    assert final.status is Status.FAILED
    assert final.stop_reason == "STORE_INTEGRITY_VIOLATION"
    assert Run.objects.get(pk=state.run_id).status == "failed"
    (handoff,) = Handoff.objects.filter(run_id=state.run_id)
    assert handoff.reason == "STORE_INTEGRITY_VIOLATION"
    # The clashing request was never written: only the planted row exists.
    assert ConfirmationRow.objects.filter(run_id=state.run_id).count() == 1


def test_a_tool_version_cannot_hold_the_token_separator():
    """issue 9 item 4: the idempotency token hashes "run:proposal:version:args"; a proposal id
    may hold ":", so a version with one could spell another command's token."""
    from policy.domain.errors import RegistryError
    from runs.tools.search import contract as search_contract

    good = search_contract()
    assert ":" not in good.version
    with pytest.raises(RegistryError):
        dataclasses.replace(good, version="1:2")
