"""Approval fatigue (issue 24 item 3), as reads: the identical proposals waiting in other runs
(decided together, each still per run: ``runs.services.confirmations_decide_batch``), and the
last approved call of the same tool for the same subject, with a diff against it.

"Identical" is the same tool and the same exact arguments hash: the proposal hash covers the
tool's name, version and the canonical arguments, so equal hashes are equal calls. A per-run
confirmation's hash names only the tool (its card's ``binding`` is "run") and is never grouped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F

from policy.domain.confirmation.json_diff import Diff, json_diff
from policy.domain.secrets.redaction import shown_arguments
from policy.models import Confirmation as ConfirmationRow
from policy.queue_list import APPROVED, pending_for
from policy.selectors import QueueItem

MAX_BATCH = 200  # identical proposals decided at once (the page lists each one it sends)
_TAG = re.compile(r"\[secret:hmac-sha256:[0-9a-f]{12}\]")


@dataclass(frozen=True)
class Identical:
    confirmation_id: str
    run_id: str
    subject: str
    goal: str
    requested_at: datetime


@dataclass(frozen=True)
class ApprovedBefore:
    confirmation_id: str
    run_id: str
    decided_at: datetime | None
    decided_by: str
    same: bool
    diff: Diff


def identical_waiting(*, viewer: Any, item: QueueItem) -> list[Identical]:
    """The pending proposals ``viewer`` may decide with the same tool and exact arguments hash
    as ``item`` (the card shown; itself first, then oldest first); empty when it waits alone
    or is a per-run confirmation (``item.binding == "run"``). One query."""
    if item.binding == "run":
        return []
    rows = (
        pending_for(viewer)
        .filter(
            proposal_hash=item.proposal_hash,
            tool_name=item.tool_name,
            tool_version=item.tool_version,
        )
        .annotate(run_subject=F("run__subject"), run_goal=F("run__goal"))
        .order_by("requested_at", "id")[:MAX_BATCH]
    )
    found = [
        Identical(r.pk, r.run_id, r.run_subject, r.run_goal[:160], r.requested_at) for r in rows
    ]
    if len(found) < 2:
        return []
    found.sort(key=lambda i: i.confirmation_id != item.confirmation_id)
    return found


def _untag(value: Any) -> Any:
    if isinstance(value, str):
        return _TAG.sub("[masked secret]", value)
    if isinstance(value, list):
        return [_untag(v) for v in value]
    if isinstance(value, dict):
        return {k: _untag(v) for k, v in value.items()}
    return value


def _masked(value: Any) -> Any:
    """The arguments as the card shows them: secrets masked, each tag in the card's words."""
    return _untag(shown_arguments(value))


def _arguments(proposal: Any) -> Any:
    return proposal.get("arguments") if isinstance(proposal, dict) else None


def approved_before(*, item: QueueItem) -> ApprovedBefore | None:
    """The last approved call of ``item``'s tool for its run's subject (approved, or approved
    and used since), with a JSON-path diff of its arguments against these, both masked as the
    card masks them (``item.exact``: the shown arguments, secrets already tagged); None when
    that subject never had one approved. One query."""
    last = (
        ConfirmationRow.objects.filter(
            status__in=APPROVED,
            tool_name=item.tool_name,
            run__subject=item.subject,
            decided_at__isnull=False,
        )
        .exclude(pk=item.confirmation_id)
        .select_related("decided_by")
        .order_by("-decided_at", "-id")
        .first()
    )
    if last is None:
        return None
    diff = json_diff(_masked(_arguments(last.proposal)), _untag(json.loads(item.exact)))
    return ApprovedBefore(
        confirmation_id=last.pk,
        run_id=last.run_id,
        decided_at=last.decided_at,
        decided_by=last.decided_by.get_username() if last.decided_by else "",
        same=last.proposal_hash == item.proposal_hash,
        diff=diff,
    )
