"""The README's "Tool policy reference" example, exactly as printed: the third-party package
``tests/plugins/tracker.py`` registers through AGENTCONSOLE_TOOLS with the README's settings and
grants, and runs through the gate as the README says (issue 12 item 3)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentconsole import wiring
from policy.models import Confirmation
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.domain.machine import Status
from tests.plugins import tracker
from tests.support.planner import tool_call

ROOT = Path(__file__).resolve().parents[2]
SECTION = (ROOT / "docs" / "tool-policy.md").read_text()


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", SECTION, flags=re.S)


def readme_settings() -> dict[str, Any]:
    (block,) = [b for b in _blocks("python") if b.startswith("AGENTCONSOLE_TOOLS = ")]
    names: dict[str, Any] = {}
    exec(block, {}, names)  # noqa: S102 - the README's own two assignments, nothing else
    return names


def readme_grants() -> list[dict[str, Any]]:
    (block,) = [b for b in _blocks("json") if '"tracker:read"' in b]
    return json.loads(block)


def test_the_readme_prints_the_package_verbatim() -> None:
    assert (ROOT / "tests/plugins/tracker.py").read_text() in _blocks("python")


def test_the_readme_settings_register_and_validate(settings: Any) -> None:
    for name, value in readme_settings().items():
        setattr(settings, name, value)
    wiring.registry.cache_clear()
    wiring.tool_policy.cache_clear()
    try:
        names = {c.name for c in wiring.static_contracts()}
        assert {"tracker_read", "tracker_comment"} <= names
        assert wiring.tool_policy().data() == {
            "tracker_comment": {"confirmation": "when_untrusted", "approvers": "owner"}
        }
    finally:
        wiring.registry.cache_clear()
        wiring.tool_policy.cache_clear()


@pytest.fixture
def readme_deployment(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in readme_settings().items():
        setattr(settings, name, value)
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: None)
    wiring.registry.cache_clear()
    wiring.tool_policy.cache_clear()
    tracker.COMMENTS.clear()
    yield settings
    wiring.registry.cache_clear()
    wiring.tool_policy.cache_clear()


def _run(outputs: list[Any]) -> m.Run:
    state = services.run_create(
        subject="alice",
        goal="Tell the ticket what we found.",
        budgets=RunBudgets(max_steps=8, max_tool_calls=5, max_repeated_proposal=2),
        grants=readme_grants(),
        planner={"kind": "fixture", "outputs": outputs},
    )
    services.run_advance(run_id=state.run_id)
    return m.Run.objects.get(pk=state.run_id)


@pytest.mark.django_db(transaction=True)
def test_the_readme_example_runs_as_described(readme_deployment: Any) -> None:
    read = tool_call("p1", "tracker_read", {"ticket": "OPS-7"})
    bad_id = tool_call("p2", "tracker_read", {"ticket": "ops-7"})
    elsewhere = tool_call(
        "p3", "tracker_comment", {"ticket": "OPS-7", "text": "x", "link": "https://evil.test/"}
    )
    labelled = tool_call(
        "p4", "tracker_comment", {"ticket": "OPS-7", "text": "x", "labels": ["ops", "urgent"]}
    )
    # No labels (absent_or) and a label of the list (subset_of) both pass.
    clean = tool_call(
        "p5", "tracker_comment", {"ticket": "OPS-7", "text": "on it", "labels": ["ops"]}
    )
    # Quoting the untrusted description in the text is allowed (text: carry), and cites it.
    quoted = tool_call(
        "p6",
        "tracker_comment",
        {"ticket": "OPS-7", "text": "Reported: disk full on build-3."},
        sources=["tool-1"],
    )
    # The ticket named in the description, citing only the user's request: it waits anyway.
    tainted = tool_call("p7", "tracker_comment", {"ticket": "SEC-1", "text": "as asked"})
    run = _run([read, bad_id, elsewhere, labelled, clean, quoted, tainted])

    assert m.Observation.objects.get(run_id=run.pk, observation_id="tool-1").trust == (
        "untrusted-content"
    )
    refused = m.Observation.objects.filter(run_id=run.pk, kind="policy-rejection")
    assert sorted(refused.values_list("observation_id", "content__code")) == [
        ("policy-2", "CAPABILITY_CONSTRAINT_VIOLATED"),  # not a full match of the pattern
        ("policy-3", "CAPABILITY_CONSTRAINT_VIOLATED"),  # a link to another host
        ("policy-4", "CAPABILITY_CONSTRAINT_VIOLATED"),  # a label not in the list
    ]
    # The comments whose arguments came from the user or carry only quoted text were posted at
    # once, each naming its proposal.
    assert [c["by"] for c in tracker.COMMENTS.values()] == [
        f"agentconsole {run.pk}/p5",
        f"agentconsole {run.pk}/p6",
    ]
    # The comment on the ticket read in the untrusted description waits for the owner.
    assert run.status == Status.WAITING_CONFIRMATION.value
    pending = Confirmation.objects.get(pk=run.pending_confirmation_id)
    assert pending.proposal["proposal_id"] == "p7"
    asked = m.TraceEvent.objects.filter(
        run_id=run.pk, event="policy.confirmation.checked", details__result="required"
    ).get()
    assert (asked.details["why"], asked.details["untrusted_arguments"]) == (
        "UNTRUSTED_PROVENANCE",
        ["ticket"],
    )
