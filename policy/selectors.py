"""Reads of grants and confirmations, as domain values or as rows for exports and pages."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F, Q

from agentconsole.kernel import roles, sqlbatch
from policy.approvers import approver_facts
from policy.domain.canonical import (
    canonical,
    per_run_confirmation_hash,
    pretty_json,
    proposal_hash_from_canonical,
)
from policy.domain.confirmation.approvers import (
    ApproverRule,
    PriorApproval,
    approvals_needed,
    approver_rule,
    may_approve,
    progress,
    rules_allowing,
)
from policy.domain.confirmation.confirmations import Confirmation, ConfirmationStatus
from policy.domain.errors import NotFound
from policy.domain.grants import CapabilityGrant
from policy.domain.observations import TrustLabel
from policy.domain.origins.provenance_shown import NOT_RECORDED, ProvenanceShown
from policy.domain.registry import ToolRegistry
from policy.domain.secrets.redaction import MASKED_SECRETS, shown_arguments
from policy.models import Confirmation as ConfirmationRow
from policy.models import ConfirmationApproval, Grant
from policy.provenance_selectors import (
    Observations,
    RecordedProvenance,
    cited_ids,
    confirmations_provenance,
)
from runs.domain import writes

QUEUE_LIMIT = 100  # the operator queue shows the oldest hundred and says how many wait in all
FOLD_AT = 120  # a value longer than this (or on several lines) is folded on the page

# The runs side of provenance (runs.selectors.cited_observations), handed down by the page:
# {run_id: cited ids} -> {(run_id, observation_id): {"kind", "trust", "step", "content"}}.
CitedObservations = Observations


GRANT_COLUMNS = (
    "id", "capability", "resource_scope", "expires_at_step", "max_calls", "calls_used",
    "constraints",
)  # fmt: skip
CONFIRMATION_COLUMNS = (
    "id",
    "proposal_hash",
    "status",
    "expires_at_step",
    "tool_name",
    "hash_scheme",
)


def grants_read(run_id: str) -> sqlbatch.Read:
    """The run's grants, read on every step (with the run row: ``runs.orm.store``)."""
    return sqlbatch.select(Grant, GRANT_COLUMNS, {"run": run_id}, order_by=("id",))


def grants_from_rows(run_id: str, rows: Iterable[tuple[Any, ...]]) -> list[CapabilityGrant]:
    return [
        CapabilityGrant(
            grant_id=grant_id,
            capability=capability,
            run_id=run_id,
            resource_scope=scope,
            expires_at_step=expires,
            max_calls=max_calls,
            calls_used=used,
            constraints=constraints,
        )
        for grant_id, capability, scope, expires, max_calls, used, constraints in rows
    ]


def run_grants(*, run_id: str) -> list[CapabilityGrant]:
    (rows,) = sqlbatch.fetch([grants_read(run_id)])
    return grants_from_rows(run_id, rows)


def confirmations_read(run_id: str) -> sqlbatch.Read:
    # Used and expired ones authorize nothing; they are read so the trace can say why a
    # proposal still needs a person (CONFIRMATION_ALREADY_USED). At most one per step.
    return sqlbatch.select(ConfirmationRow, CONFIRMATION_COLUMNS, {"run": run_id})


def confirmations_from_rows(run_id: str, rows: Iterable[tuple[Any, ...]]) -> list[Confirmation]:
    return [
        Confirmation(
            confirmation_id=confirmation_id,
            run_id=run_id,
            proposal_hash=proposal_hash,
            status=ConfirmationStatus(status),
            expires_at_step=expires,
            tool_name=tool_name or None,
            hash_scheme=hash_scheme,
        )
        for confirmation_id, proposal_hash, status, expires, tool_name, hash_scheme in rows
    ]


def run_confirmations(*, run_id: str) -> list[Confirmation]:
    (rows,) = sqlbatch.fetch([confirmations_read(run_id)])
    return confirmations_from_rows(run_id, rows)


def confirmation_get(*, confirmation_id: str | None) -> ConfirmationRow:
    row = ConfirmationRow.objects.filter(pk=confirmation_id).first() if confirmation_id else None
    if row is None:
        raise NotFound("no such confirmation", confirmation_id=confirmation_id)
    return row


def prior_approvals(approvals: Iterable[ConfirmationApproval]) -> list[PriorApproval]:
    """The facts of recorded approvals the approver rule reads."""
    return [
        PriorApproval(
            user_id=a.user_id or f"name:{a.username}", name=a.username, independent=a.independent
        )
        for a in approvals
    ]


def runs_with_tool_confirmations(*, tool_name: str) -> Any:
    """The ids of runs with a confirmation of ``tool_name`` (a proposal of it that asked a
    person), as a subquery: the runs list's tool filter (index ``confirmation_tool_run``)."""
    return ConfirmationRow.objects.filter(tool_name=tool_name).values("run_id")


def grants_export(*, run_id: str) -> list[dict[str, Any]]:
    # dict(...) per row: django-stubs types values() rows as a TypedDict, not dict[str, Any].
    return [
        dict(row)
        for row in Grant.objects.filter(run_id=run_id)
        .order_by("id")
        .values(
            "id",
            "capability",
            "resource_scope",
            "expires_at_step",
            "max_calls",
            "calls_used",
            "constraints",
        )
    ]


def confirmations_export(*, run_id: str) -> list[dict[str, Any]]:
    return [
        dict(row)
        for row in ConfirmationRow.objects.filter(run_id=run_id)
        .order_by("requested_at", "id")
        .values(
            "id",
            "proposal_hash",
            "tool_name",
            "tool_version",
            "status",
            "expires_at_step",
            "cites_untrusted",
            "origin",
        )
    ]


def pending_confirmations_count() -> int:
    return ConfirmationRow.objects.filter(status="pending").count()


@dataclass(frozen=True)
class ShownArgument:
    name: str
    text: str  # pretty JSON of the value (types stay visible: "7" is not 7)
    folded: bool
    preview: str
    # ``text`` cut at each masked secret: (text, None) pieces and (tag, its length or 0 when
    # unknown) pieces, so the page says "masked secret, N characters" where a value was.
    parts: tuple[tuple[str, int | None], ...] = ()

    @property
    def masked(self) -> bool:
        """It holds a masked secret: shown unfolded, so nobody approves it without seeing so."""
        return any(chars is not None for _, chars in self.parts)


@dataclass(frozen=True)
class MaskedSecret:
    tag: str
    chars: int  # the length of the secret the tag hides; 0 when not recorded (an older row)


@dataclass(frozen=True)
class CitedSource:
    observation_id: str
    trust: str  # a trust label, or "missing" when the run has no such observation
    kind: str
    step: int | None
    text: str  # the observation's content as pretty JSON; shown as text, never as HTML

    @property
    def untrusted(self) -> bool:
        return self.trust == TrustLabel.UNTRUSTED_CONTENT


@dataclass(frozen=True)
class QueueItem:
    confirmation_id: str
    run_id: str
    goal: str
    subject: str
    tool_name: str
    tool_version: str
    side_effect: str  # "unknown" for a tool this deployment does not register
    capabilities: tuple[str, ...]
    proposal_hash: str
    hash_scheme: str
    requested_at: datetime
    reason_summary: str
    arguments: tuple[ShownArgument, ...]
    exact: str  # the canonical JSON the hash covers, secrets masked
    # Each masked secret in the arguments: the tool gets its real value, nobody is shown it.
    masked: tuple[MaskedSecret, ...]
    # What the hash binds, checked here: "call" (these arguments, once), "run" (a per-run
    # confirmation: every call of the tool in the run), "masked" (these arguments, once, with
    # masked secrets: the hash covers their real values, so the shown bytes cannot be
    # checked), "mismatch" (the hash matches neither: never expected).
    binding: str
    sources: tuple[CitedSource, ...]
    derived_from_untrusted: bool
    # Who may decide it (policy.domain.confirmation.approvers) and where it stands: "needs two
    # approvers: 1 of 2, approved by alice". ``approve_refusal`` says why the viewer may decline but
    # not approve (they approved already, or the second approver must be an independent operator).
    approvers: str
    approvals_needed: int
    approved_by: tuple[str, ...]
    progress: str
    approve_refusal: str
    # What the run's writes came to before this one (runs.domain.writes): a write of the same
    # run that was rejected or failed is worth knowing before approving the next.
    run_writes: str = ""
    run_writes_not_applied: int = 0
    # Recorded provenance (policy.provenance_selectors); the edit form's JSON (issue 24 item 1).
    provenance: ProvenanceShown = NOT_RECORDED
    editable: str = ""


@dataclass(frozen=True)
class Queue:
    items: list[QueueItem]
    total: int  # pending in all (the page shows at most QUEUE_LIMIT)


def confirmation_queue(
    *,
    viewer: Any,
    registry: ToolRegistry,
    observations: CitedObservations,
    recorded: RecordedProvenance | None = None,
    limit: int = QUEUE_LIMIT,
) -> Queue:
    """Pending confirmations ``viewer`` may decide, oldest first, with what is needed to decide
    each: the tool's contract facts, the arguments as shown, the run's goal and subject,
    provenance, and the approver rule with the approvals so far.

    Each item is shown only to those its approver rule lets decide it: the filter is SQL built
    from ``rules_allowing`` (so ``total`` counts what this viewer may decide). A four-eyes item
    the viewer already approved stays listed, as waiting for a second approver, without an
    Approve button (they may still decline it).

    A fixed number of queries whatever the queue's length: the confirmations with their run's
    goal, subject and owner (one join), what the runtime recorded of their provenance (one
    query, with ``recorded``), the observations they cite or that record names (one query), the
    capabilities of the grants it names (one query, only when it names some), the approvals of
    the four-eyes items among them (one query, only when there are some), and a count only when
    the page is full.
    """
    pending = ConfirmationRow.objects.filter(
        decidable_by(viewer), status=ConfirmationStatus.PENDING.value
    )
    rows = list(_with_card_facts(pending).order_by("requested_at", "id")[:limit])
    total = len(rows) if len(rows) < limit else pending.count()
    return Queue(items=_cards(rows, viewer, registry, observations, recorded), total=total)


def confirmation_queue_item(
    *,
    viewer: Any,
    registry: ToolRegistry,
    observations: CitedObservations,
    confirmation_id: str,
    recorded: RecordedProvenance | None = None,
) -> QueueItem | None:
    """The card of one pending confirmation ``viewer`` may decide (the queue's detail pane),
    or None when it is not (or no longer) waiting for them. The queries of the queue's, for
    one row."""
    pending = ConfirmationRow.objects.filter(
        decidable_by(viewer), status=ConfirmationStatus.PENDING.value, pk=confirmation_id
    )
    rows = list(_with_card_facts(pending))
    cards = _cards(rows, viewer, registry, observations, recorded)
    return cards[0] if cards else None


def _with_card_facts(pending: Any) -> Any:
    return pending.annotate(
        run_goal=F("run__goal"),
        run_subject=F("run__subject"),
        run_owner=F("run__owner_id"),
        **{name: F(f"run__{name}") for name in writes.FIELDS.values()},
    )


def _cards(
    rows: list[Any],
    viewer: Any,
    registry: ToolRegistry,
    observations: CitedObservations,
    recorded: RecordedProvenance | None,
) -> list[QueueItem]:
    provenance = confirmations_provenance(rows, recorded=recorded, observations=observations)
    # Only a rule that needs several approvals has any while pending (a one-approver rule's
    # approval is its decision), so the others need no query.
    several = [r.pk for r in rows if approvals_needed(approver_rule(r.approvers)) > 1]
    approvals: dict[str, list[ConfirmationApproval]] = {}
    for a in ConfirmationApproval.objects.filter(confirmation_id__in=several) if several else ():
        approvals.setdefault(a.confirmation_id, []).append(a)
    return [
        _queue_item(
            row,
            registry,
            provenance.observations,
            viewer=viewer,
            approvals=approvals.get(row.pk, []),
            provenance=provenance.of(row.pk),
        )
        for row in rows
    ]


def decidable_by(viewer: Any) -> Q:
    """The confirmations whose rule lets ``viewer`` decide them, as a filter (the run is their own
    when they started it or it was started for them: policy.approvers.approver_facts)."""
    operator = roles.is_operator(viewer)
    own = Q(run__owner_id=viewer.pk) | Q(run__subject=viewer.get_username())
    when_own = rules_allowing(is_operator=operator, own=True)
    when_not = rules_allowing(is_operator=operator, own=False)
    return (own & Q(approvers__in=_values(when_own))) | (~own & Q(approvers__in=_values(when_not)))


def _values(rules: Iterable[ApproverRule]) -> list[str]:
    return sorted(r.value for r in rules)


def confirmation_exact_arguments(*, confirmation_id: str) -> str:
    """The canonical JSON (RFC 8785) of a confirmation's arguments as shown: the bytes its hash
    covers, with secrets masked."""
    row = confirmation_get(confirmation_id=confirmation_id)
    return canonical(shown_arguments(_arguments(row.proposal)), row.hash_scheme)


def _queue_item(
    row: Any,
    registry: ToolRegistry,
    found: Mapping[tuple[str, str], Mapping[str, Any]],
    *,
    viewer: Any,
    approvals: list[ConfirmationApproval],
    provenance: ProvenanceShown = NOT_RECORDED,
) -> QueueItem:
    rule = approver_rule(row.approvers)
    person = approver_facts(viewer, run_owner_id=row.run_owner, run_subject=row.run_subject)
    verdict = may_approve(rule, person, prior_approvals(approvals))
    approved_by = tuple(a.username for a in approvals)
    proposal = row.proposal if isinstance(row.proposal, dict) else {}
    registered = registry.get(row.tool_name, row.tool_version)
    run_writes = writes.counts_of(row)  # annotated from the run in the queue's one join
    raw = _arguments(proposal)
    shown = shown_arguments(raw)
    exact = canonical(shown, row.hash_scheme)
    tags = _masked(exact, proposal.get(MASKED_SECRETS))
    binding = _binding(row, exact, masked=bool(tags))
    # Text that only looks like a tag, under a hash that covers it as written, hides nothing.
    masked = tags if binding == "masked" else ()
    sources = tuple(_source(i, found.get((row.run_id, i))) for i in cited_ids(proposal))
    return QueueItem(
        confirmation_id=row.pk,
        run_id=row.run_id,
        goal=row.run_goal,
        subject=row.run_subject,
        tool_name=row.tool_name,
        tool_version=row.tool_version,
        side_effect=registered.contract.side_effect.value if registered else "unknown",
        capabilities=registered.contract.required_capabilities if registered else (),
        proposal_hash=row.proposal_hash,
        hash_scheme=row.hash_scheme,
        requested_at=row.requested_at,
        reason_summary=str(proposal.get("reason_summary") or ""),
        arguments=_shown(shown, masked),
        exact=exact,
        masked=masked,
        binding=binding,
        sources=sources,
        derived_from_untrusted=row.cites_untrusted or any(s.untrusted for s in sources),
        approvers=rule.value,
        approvals_needed=approvals_needed(rule),
        approved_by=approved_by,
        progress=progress(rule, approved_by),
        approve_refusal="" if verdict.allowed else verdict.message,
        run_writes=writes.summary_text(run_writes),
        run_writes_not_applied=writes.not_applied(run_writes),
        provenance=provenance,
        editable=pretty_json(shown),
    )


def _binding(row: Any, exact: str, *, masked: bool) -> str:
    """What the hash binds; ``exact`` is the shown arguments' canonical text in the row's scheme
    (the wrapper's canonical text is the same concatenation in c1 and c2)."""
    scheme = row.hash_scheme
    if row.proposal_hash == per_run_confirmation_hash(row.tool_name, row.tool_version, scheme):
        return "run"
    if row.proposal_hash == proposal_hash_from_canonical(row.tool_name, row.tool_version, exact):
        return "call"
    if masked:
        return "masked"
    return "mismatch"


def _arguments(proposal: Any) -> Any:
    return proposal.get("arguments") if isinstance(proposal, dict) else None


def _masked(exact: str, lengths: Any) -> tuple[MaskedSecret, ...]:
    """Each tag in the shown arguments, once, with the length of the secret it hides as the
    gate recorded it (``MASKED_SECRETS``; 0 for a row from before, or a pattern added since)."""
    known = lengths if isinstance(lengths, dict) else {}
    tags = dict.fromkeys(_TAG.findall(exact))
    return tuple(MaskedSecret(t, c if isinstance(c := known.get(t), int) else 0) for t in tags)


_TAG = re.compile(r"\[secret:hmac-sha256:[0-9a-f]{12}\]")


def _parts(text: str, chars: Mapping[str, int]) -> tuple[tuple[str, int | None], ...]:
    parts: list[tuple[str, int | None]] = []
    at = 0
    for match in _TAG.finditer(text):
        if match.group(0) not in chars:
            continue  # text that looks like a tag, hashed as written: shown as written
        parts.append((text[at : match.start()], None))
        parts.append((match.group(0), chars[match.group(0)]))
        at = match.end()
    parts.append((text[at:], None))
    return tuple(parts)


def _label(chars: int) -> str:
    # The words the page puts where a secret was (templates/console/confirmations/_parts.html).
    return f"[masked secret, {chars} characters]" if chars else "[masked secret]"


def _shown(arguments: Any, masked: Iterable[MaskedSecret] = ()) -> tuple[ShownArgument, ...]:
    pairs = arguments.items() if isinstance(arguments, dict) else [("(arguments)", arguments)]
    chars = {m.tag: m.chars for m in masked}
    out = []
    for name, value in sorted(pairs, key=lambda pair: str(pair[0])):
        text = pretty_json(value)
        folded = len(text) > FOLD_AT or "\n" in text
        parts = _parts(text, chars)
        plain = "".join(t if c is None else _label(c) for t, c in parts) if parts else text
        preview = plain.replace("\n", " ")[:60] + ("…" if folded else "")
        out.append(ShownArgument(str(name), text, folded, preview, parts))
    return tuple(out)


def _source(observation_id: str, row: Mapping[str, Any] | None) -> CitedSource:
    if row is None:
        return CitedSource(observation_id, "missing", "", None, "")
    return CitedSource(
        observation_id, row["trust"], row["kind"], row["step"], pretty_json(row["content"])
    )
