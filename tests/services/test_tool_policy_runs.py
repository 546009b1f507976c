"""Tool policy end to end (issue 12 item 3): runs through the real Runner, the ORM store, the
thread executor and the built-in tools, with the policy from settings and from a profile.

* ``when_untrusted`` (issue 23): a write whose content copies the untrusted search result waits
  for a person whatever it cites (the search, only the user's request, nothing, an unknown id);
  the same write with the planner's own words runs whatever it cites.
* ``pattern`` and ``url_host_in`` hold on real calls (grant constraints and auto constraints).
* A tool labels the parts of its result; the observation, the trace and the console say so.
* The run keeps the policy it was created with when the profile is edited later.

Personas: ``operator`` defines profiles; ``alice`` owns the runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from agentconsole import checks, wiring
from agentconsole.ops import celery_signals
from memory.models import WorkingMemoryItem
from policy.domain.observations import TrustLabel
from policy.models import Confirmation
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.domain.machine import Status
from runs.domain.profiles import ProfileInvalid
from runs.start import profiles
from runs.tools.corpus import demo_corpus_dir, document_load
from tests.plugins import tracker
from tests.support.personas import user_fixture
from tests.support.planner import tool_call

pytestmark = pytest.mark.django_db(transaction=True)

operator = user_fixture("operator", "operator")
alice = user_fixture("alice", "user")

SEARCH = {"capability": "search:public", "resource_scope": "public", "expires_at_step": 20}
WRITE = {"capability": "artifact:write", "resource_scope": "run-output", "expires_at_step": 20}
READ_TICKET = {
    "capability": "tracker:read",
    "resource_scope": "*",
    "expires_at_step": 20,
    "constraints": {"ticket": {"pattern": "[A-Z]{2,5}-[0-9]{1,6}"}},
}
COMMENT = {
    "capability": "tracker:comment",
    "resource_scope": "*",
    "expires_at_step": 20,
    "constraints": {"link": {"absent_or": {"url_host_in": ["tracker.example.org"]}}},
}


@pytest.fixture(autouse=True)
def world(settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    settings.AGENTCONSOLE_RUN_OUTPUT_ROOT = str(tmp_path)
    settings.AGENTCONSOLE_TOOLS = ["tests.plugins.tracker"]
    # The content may carry untrusted text by the contract's own rule: this deployment asks.
    settings.AGENTCONSOLE_TOOL_POLICY = {
        "write_artifact": {"confirmation": "when_untrusted", "arguments": {"content": "confirm"}}
    }
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: None)
    wiring.registry.cache_clear()
    wiring.tool_policy.cache_clear()
    tracker.COMMENTS.clear()
    for path in sorted(demo_corpus_dir().iterdir()):
        document_load(path=path)
    yield settings
    wiring.registry.cache_clear()
    wiring.tool_policy.cache_clear()


def start(outputs: list[Any], grants: list[dict[str, Any]]) -> str:
    state = services.run_create(
        subject="alice",
        goal="Write down the retry rule.",
        budgets=RunBudgets(max_steps=8, max_tool_calls=4, max_repeated_proposal=2),
        grants=grants,
        planner={"kind": "fixture", "outputs": outputs},
    )
    return state.run_id


def advance(run_id: str) -> m.Run:
    services.run_advance(run_id=run_id)
    return m.Run.objects.get(pk=run_id)


def confirmation_events(run_id: str) -> list[dict[str, Any]]:
    rows = m.TraceEvent.objects.filter(run_id=run_id, event="policy.confirmation.checked")
    return [r.details for r in rows.order_by("sequence")]


def search() -> dict[str, Any]:
    return tool_call("p1", "search_public", {"query": "retry quarantine"})


# A sentence of the retrieved retry policy (runs/fixtures/corpus/retry-policy.md), respaced.
COPIED = "A task is retried  automatically at most three times."
OWN = "Retry three times."


def write(sources: list[str] | None, content: str = COPIED) -> dict[str, Any]:
    args = {"path": "run-output/notes/retry.md", "content": content}
    return tool_call("p2", "write_artifact", args, sources=sources)


def final(cites: list[str]) -> dict[str, Any]:
    return {"kind": "final", "answer": "Noted.", "citation_observation_ids": cites}


# ---- when_untrusted ---------------------------------------------------------------------------


def test_a_write_copying_an_untrusted_search_result_waits_for_a_person() -> None:
    run_id = start([search(), write(["tool-1"]), final(["tool-2"])], [SEARCH, WRITE])
    run = advance(run_id)

    assert m.Observation.objects.get(run_id=run_id, observation_id="tool-1").trust == (
        TrustLabel.UNTRUSTED_CONTENT.value
    )
    assert run.status == Status.WAITING_CONFIRMATION.value
    assert run.tool_policy == {
        "write_artifact": {"confirmation": "when_untrusted", "arguments": {"content": "confirm"}}
    }
    assert not m.Artifact.objects.filter(run_id=run_id).exists()
    required = confirmation_events(run_id)[-1]
    assert required["result"] == "required"
    assert required["why"] == "UNTRUSTED_PROVENANCE"
    assert required["untrusted_observation_ids"] == ["tool-1"]
    assert required["untrusted_arguments"] == ["content"]

    # The person approves the exact call: it runs once, and the run finishes.
    pending = Confirmation.objects.get(pk=run.pending_confirmation_id)
    services.confirmation_decide(
        confirmation_id=pending.pk, approved=True, shown_hash=pending.proposal_hash, by=alice
    )
    done = advance(run_id)
    assert (done.status, done.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert m.Artifact.objects.filter(run_id=run_id).count() == 1


@pytest.mark.parametrize(
    "sources",
    [["tool-1"], ["user-1"], None, ["tool-99"]],
    ids=["search", "request", "none", "unknown"],
)
def test_what_the_write_cites_changes_nothing(sources: Any) -> None:
    """The runtime's provenance decides: the copied content waits citing only the request (or
    nothing), the planner's own words run citing the untrusted search."""
    copied = advance(start([search(), write(sources), final(["tool-2"])], [SEARCH, WRITE]))
    assert copied.status == Status.WAITING_CONFIRMATION.value
    assert confirmation_events(copied.pk)[-1]["untrusted_observation_ids"] == ["tool-1"]
    own = advance(start([search(), write(sources, OWN), final(["tool-2"])], [SEARCH, WRITE]))
    assert (own.status, own.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert confirmation_events(own.pk)[-1]["result"] == "not-required"


# ---- pattern and url_host_in on real calls ----------------------------------------------------


def test_pattern_and_url_host_in_hold_on_a_run() -> None:
    """Grant constraints: the ticket id must match the pattern in full, a link must point at
    the tracker's host. Each refusal is a policy observation; the allowed calls run."""
    outputs = [
        tool_call("p1", "tracker_read", {"ticket": "OPS-7; DROP TABLE"}),
        tool_call("p2", "tracker_read", {"ticket": "OPS-7"}),
        tool_call(
            "p3",
            "tracker_comment",
            {"ticket": "OPS-7", "text": "see", "link": "https://tracker.example.org.evil.io/x"},
        ),
        tool_call(
            "p4",
            "tracker_comment",
            {"ticket": "OPS-7", "text": "see", "link": "https://tracker.example.org/OPS-7"},
            sources=["user-1"],
        ),
        final(["tool-2", "tool-4"]),
    ]
    run_id = start(outputs, [READ_TICKET, COMMENT])
    run = advance(run_id)
    assert run.status == Status.WAITING_CONFIRMATION.value  # p4: the contract asks per call
    codes = dict(
        m.Observation.objects.filter(run_id=run_id, kind="policy-rejection").values_list(
            "observation_id", "content__code"
        )
    )
    assert codes == {
        "policy-1": "CAPABILITY_CONSTRAINT_VIOLATED",  # pattern: not a full match
        "policy-3": "CAPABILITY_CONSTRAINT_VIOLATED",  # url_host_in: another host
    }
    assert m.Observation.objects.get(run_id=run_id, observation_id="tool-2").content["value"][
        "ticket"
    ] == {"id": "OPS-7", "status": "open", "assignee": "alice"}


def test_subset_of_and_absent_or_hold_on_a_run() -> None:
    """Grant constraints on a list and on an optional argument: labels must come from the
    allowed set; a link may be left out, but one that is given must point at the tracker. The
    call that keeps both reaches the contract's own confirmation; the others are refused."""
    grant = {
        **COMMENT,
        "constraints": {**COMMENT["constraints"], "labels": {"subset_of": ["bug", "ops"]}},
    }
    outputs = [
        tool_call(
            "p1", "tracker_comment", {"ticket": "OPS-7", "text": "a", "labels": ["bug", "x"]}
        ),
        tool_call(
            "p2", "tracker_comment", {"ticket": "OPS-7", "text": "b", "link": "http://evil.io"}
        ),
        tool_call("p3", "tracker_comment", {"ticket": "OPS-7", "text": "c", "labels": ["ops"]}),
        final(["user-1"]),
    ]
    run_id = start(outputs, [grant])
    run = advance(run_id)

    codes = dict(
        m.Observation.objects.filter(run_id=run_id, kind="policy-rejection").values_list(
            "observation_id", "content__code"
        )
    )
    assert codes == {
        "policy-1": "CAPABILITY_CONSTRAINT_VIOLATED",  # subset_of: "x" is not allowed
        "policy-2": "CAPABILITY_CONSTRAINT_VIOLATED",  # absent_or: a link, to another host
    }
    assert run.status == Status.WAITING_CONFIRMATION.value
    assert run.pending_proposal["proposal_id"] == "p3"  # no link, allowed labels: granted
    assert tracker.COMMENTS == {}


def test_auto_constraints_let_a_matching_call_run_without_asking(world: Any) -> None:
    world.AGENTCONSOLE_TOOL_POLICY = {
        "tracker_comment": {
            "confirmation": "outside_constraints",
            "auto_constraints": {
                "ticket": {"pattern": "OPS-[0-9]+"},
                "link": {"absent_or": {"url_host_in": ["tracker.example.org"]}},
            },
        }
    }
    wiring.tool_policy.cache_clear()
    inside = {"ticket": "OPS-7", "text": "ok", "link": "https://tracker.example.org/a"}
    outside = {"ticket": "SEC-1", "text": "ok"}
    outputs = [
        tool_call("p1", "tracker_comment", inside),
        tool_call("p2", "tracker_comment", outside),
        final(["tool-1"]),
    ]
    run_id = start(outputs, [COMMENT])
    run = advance(run_id)

    assert run.status == Status.WAITING_CONFIRMATION.value
    assert len(tracker.COMMENTS) == 1  # p1 ran without asking; p2 waits
    (posted,) = tracker.COMMENTS.values()
    assert posted["by"] == f"agentconsole {run_id}/p1"  # the tool context names the proposal
    required = confirmation_events(run_id)[-1]
    assert required["why"] == "OUTSIDE_AUTO_CONSTRAINTS"


# ---- labelled parts ---------------------------------------------------------------------------


def test_a_tool_labels_the_parts_of_its_result(world: Any, client: Any, operator: Any) -> None:
    """The ticket's system fields keep the contract's trust; its description is untrusted, so
    the observation as a whole is untrusted, and a comment on the ticket its description names
    waits under when_untrusted."""
    world.AGENTCONSOLE_TOOL_POLICY = {"tracker_comment": {"confirmation": "when_untrusted"}}
    wiring.tool_policy.cache_clear()
    outputs = [
        tool_call("p1", "tracker_read", {"ticket": "OPS-7"}),
        tool_call("p2", "tracker_comment", {"ticket": "SEC-1", "text": "x"}),
    ]
    run_id = start(outputs, [READ_TICKET, COMMENT])
    run = advance(run_id)

    obs = m.Observation.objects.get(run_id=run_id, observation_id="tool-1")
    assert obs.trust == "untrusted-content"
    assert obs.content["part_trust"] == {
        "description": "untrusted-content",
        "ticket": "trusted-tool",
    }
    # The planner's view carries the labels with the content.
    item = WorkingMemoryItem.objects.get(run_id=run_id, item_id="wm-tool-1")
    assert item.trust == "untrusted-content"
    assert '"part_trust": {"description": "untrusted-content"' in item.content
    validated = m.TraceEvent.objects.get(run_id=run_id, event="tool.result.validated")
    assert validated.details["untrusted_parts"] == ["description"]
    assert run.status == Status.WAITING_CONFIRMATION.value
    assert confirmation_events(run_id)[-1]["why"] == "UNTRUSTED_PROVENANCE"
    assert not tracker.COMMENTS

    client.force_login(operator)
    page = client.get(f"/runs/{run_id}/").content.decode()
    assert 'data-part="description" data-trust="untrusted-content"' in page
    assert 'data-part="ticket" data-trust="trusted-tool"' in page


# ---- configuration ----------------------------------------------------------------------------


def test_a_bad_deployment_policy_stops_the_start(world: Any) -> None:
    world.AGENTCONSOLE_TOOL_POLICY = {"write_artefact": {"confirmation": "always"}}
    wiring.tool_policy.cache_clear()
    errors = checks.check_tool_policy()
    assert [e.id for e in errors] == ["agentconsole.E002"]
    assert "no registered tool 'write_artefact'" in errors[0].msg
    with pytest.raises(SystemCheckError, match=r"agentconsole\.E002"):
        call_command("check")


def test_a_bad_deployment_policy_stops_a_worker_at_its_start(world: Any) -> None:
    """A worker runs none of Django's checks at start (agentconsole/celery.py), but still the
    configuration's: it exits before it takes a task."""
    assert celery_signals.CONFIGURATION_CHECKS == checks.CONFIGURATION
    celery_signals._worker_init()  # the deployment's policy as the fixture set it: starts
    world.AGENTCONSOLE_TOOL_POLICY = {"write_artefact": {"confirmation": "always"}}
    wiring.tool_policy.cache_clear()
    with pytest.raises(SystemExit, match=r"the Celery worker does not start: agentconsole\.E002"):
        celery_signals._worker_init()


def _profile(tool_policy: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "notes",
        "planner": {
            "kind": "fixture",
            "outputs": [search(), write(["user-1"], OWN), final(["tool-2"])],
        },
        "tools": ["search_public", "write_artifact"],
        "grant_templates": [SEARCH, WRITE],
        "tool_policy": tool_policy,
    }


@pytest.mark.parametrize(
    ("tool_policy", "code"),
    [
        ({"write_artifact": {"confirmation": "never"}}, "TOOL_POLICY_LOOSENS"),
        ({"tracker_read": {"confirmation": "always"}}, "PROFILE_TOOL_NOT_ALLOWED"),
        ({"write_artifact": {"confirmation": "maybe"}}, "TOOL_POLICY_INVALID"),
    ],
)
def test_a_profile_policy_that_loosens_or_is_malformed_is_refused(
    operator: Any, tool_policy: dict[str, Any], code: str
) -> None:
    with pytest.raises(ProfileInvalid) as caught:
        profiles.profile_create(data=_profile(tool_policy), by=operator)
    assert caught.value.code == code
    assert not m.RunProfile.objects.exists()


def test_a_run_keeps_the_policy_it_was_created_with(operator: Any, alice: Any) -> None:
    row = profiles.profile_create(
        data=_profile({"write_artifact": {"confirmation": "always", "approvers": "owner"}}),
        by=operator,
    )
    first = profiles.run_from_profile(user=alice, ref="notes", goal="g", enqueue=False)
    # The operator loosens the profile back to the deployment's policy afterwards.
    profiles.profile_update(
        profile_id=row.pk, data=_profile({}), expected_version=row.version, by=operator
    )
    second = profiles.run_from_profile(user=alice, ref="notes", goal="g", enqueue=False)

    waiting = advance(first.run_id)
    # The deployment's argument rules join the profile's stricter mode.
    assert waiting.tool_policy == {
        "write_artifact": {
            "confirmation": "always",
            "approvers": "owner",
            "arguments": {"content": "confirm"},
        }
    }
    assert waiting.status == Status.WAITING_CONFIRMATION.value
    assert confirmation_events(first.run_id)[-1]["why"] == "TOOL_POLICY_ALWAYS"
    done = advance(second.run_id)
    assert done.tool_policy == {
        "write_artifact": {"confirmation": "when_untrusted", "arguments": {"content": "confirm"}}
    }
    assert done.status == Status.COMPLETED.value
