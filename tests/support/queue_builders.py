"""Builders for the confirmation queue's list, batch and live tests (issue 24 items 2-3).

``pending``: a pending confirmation written through ``policy.services.confirmation_request`` on a
run created by ``runs.services.run_create`` (no step: fast, for filters, paging and counts).
``waiting``: a run really stopped at ``waiting_confirmation`` by the runner (the s15 scenario,
save_preference with a value of our choosing): what a decision, single or batch, needs.
"""

from __future__ import annotations

import copy
import itertools
from datetime import timedelta
from typing import Any

from django.utils import timezone

from policy import services as policy_services
from policy.domain.canonical import proposal_hash
from policy.models import Confirmation
from runs import models as m
from tests.api import api_kit as kit
from tests.support.personas import make_user

_seq = itertools.count(1)


def pending(
    owner: Any,
    *,
    tool: str = "save_preference",
    version: str = "1",
    arguments: dict[str, Any] | None = None,
    subject: str | None = None,
    goal: str = "a goal",
    untrusted: bool = False,
    profile: str = "",
    age: timedelta | None = None,
    approvers: str = "owner_or_operator",
) -> Confirmation:
    """A pending confirmation of ``tool`` with ``arguments`` on a new run of ``owner``.
    ``profile`` and ``age`` are test set-up written beside the services (the label a profile
    start records; a requested time in the past)."""
    run_id = kit.created_run(owner, subject=subject, goal=goal)
    arguments = {"key": "k", "value": f"v{next(_seq)}"} if arguments is None else arguments
    cid = f"{run_id}~c1"
    proposal = {
        "kind": "tool", "proposal_id": "p1", "tool_name": tool, "tool_version": version,
        "arguments": arguments, "reason_summary": "test", "source_observation_ids": [],
    }  # fmt: skip
    policy_services.confirmation_request(
        run_id=run_id, confirmation_id=cid, proposal_hash=proposal_hash(tool, version, arguments),
        tool_name=tool, tool_version=version, proposal=proposal, expires_at_step=9,
        cites_untrusted=untrusted, approvers=approvers,
    )  # fmt: skip
    if profile:
        row = m.RunProfile.objects.filter(name=profile).first() or kit.profile_define(
            make_user(f"op-{profile}", "operator"), profile
        )
        m.Run.objects.filter(pk=run_id).update(profile=row)
    if age is not None:
        Confirmation.objects.filter(pk=cid).update(requested_at=timezone.now() - age)
    return Confirmation.objects.get(pk=cid)


def waiting(owner: Any, *, value: str = "zh-CN", subject: str | None = None) -> kit.Waiting:
    """A run of ``owner`` waiting on save_preference(answer_language=``value``) for ``subject``
    (default: the owner's name): identical proposals in several runs share one hash."""
    data = copy.deepcopy(kit.load_fixture("scenarios/s15-missing-confirmation.json"))
    subject = subject or owner.get_username()
    data["subject"] = subject
    data["grants"][0]["resource_scope"] = subject
    data["planner"][0]["arguments"]["value"] = value
    export = kit.scenario_run(data, owner)
    assert export["state"]["status"] == "waiting_confirmation", export["state"]
    (row,) = [c for c in export["confirmations"] if c["status"] == "pending"]
    return kit.Waiting(
        run_id=export["state"]["run_id"],
        confirmation_id=row["id"],
        proposal_hash=row["proposal_hash"],
        version=export["state"]["version"],
    )
