"""Where a subject's values can be copied, and why every other text column is left alone
(issue 21 item 3).

``ERASED`` is the one list the erase rewrites (``runs.privacy.erasure``): each ``Place`` names
columns of one table and how to find the subject's rows in it. Each app declares the places of its
own models (``policy.erasure_places``, ``memory.erasure_places``) and this list joins them, so runs
never imports another app's models (issue 25 item 4). ``NOT_REWRITTEN`` names every other text or
JSON column of every model, each with the reason the erase leaves it. A test
(``tests/memory/test_erasure_places.py``) holds the two lists to the models: a column added to a
model and named in neither fails it, so a new copy of a value cannot be forgotten silently. The
erase test derives the places it fills and checks from ``ERASED``, so a column dropped from it fails
that test (``tests/memory/test_erase_everywhere.py``).

To add a place that stores a copy (say, unmasked arguments kept for execution): append a
``Place`` to its owner's ``ERASED``, and make the erase test's scenario put a value there.
"""

from __future__ import annotations

from django.db import models

from memory import erasure_places as memory_places
from policy import erasure_places as policy_places
from policy.erasure_places import Place
from runs import models as m

__all__ = ["ERASED", "NOT_REWRITTEN", "Place", "column_name", "erased_columns"]


# The run row itself: its columns are rewritten by ``runs.privacy.erasure._erase_run``, after a
# commit that moves the run's version (a step decided on the old state then fails its
# compare-and-set).
RUN = Place(m.Run, ("goal", "planner", "pending_proposal", "answer"), run="pk")

ERASED: tuple[Place, ...] = (
    RUN,
    Place(m.TraceEvent, ("details",)),
    Place(m.Observation, ("content",)),
    # The provenance index keeps observations' content in normal form (NFKC, spaces collapsed,
    # case kept): a value as the user typed it is found there as in the observation. An erase
    # changes an entry's length, so a worker's kept copy is read again (runs.orm.taint_store).
    Place(m.TaintEntry, ("text",)),
    # outcome: a tool's own code; verification: a tool's details or a reviewer's reason.
    Place(m.LedgerEntry, ("arguments", "outcome", "verification", "resource")),
    Place(m.Artifact, ("path",)),
    # resolution: the code a tool gave back when a reviewer retried it.
    Place(m.Handoff, ("bundle", "resolution")),
    # Each owner's own places: confirmations, approvals and grants (policy), a revocation's
    # reason and working memory (memory).
    *policy_places.ERASED,
    *memory_places.ERASED,
    # A model planner's request (goal, observations, preferences) and the reply it got (its
    # proposals' arguments), kept as the record of each model call (issue 22).
    Place(m.ModelCall, ("request", "reply")),
)

_ID = "an identifier the runtime made (or a name from configuration), never content"
_CODE = "a code or status from a fixed vocabulary"
_HASH = "a hash or hash scheme: the audit keeps it (by design it cannot give the value back)"
_OPERATOR = "configuration an operator wrote, not a copy of anything a run saw"
_SCHEMA = "Django's schema bookkeeping"
_DELETED = "the row is deleted by memory.services.preferences_erase (the subject's own record)"
_PLANNER_ID = (
    "a planner-chosen id ([A-Za-z0-9_.:-], at most 128): the identity trace, ledger and "
    "confirmation are joined on (the trace's trigger refuses rewriting it). A value spelled as "
    "an id stays: a known limit (README, Security)"
)

# "app_label.Model.column" -> why the erase leaves it.
NOT_REWRITTEN: dict[str, str] = {
    # Django and the token app.
    "admin.LogEntry.object_id": _ID,
    "admin.LogEntry.object_repr": (
        "the name of an object changed in the admin: every runtime model's admin is read-only "
        "(agentconsole.kernel.admin_base.ReadOnlyAdmin); only documents, users and groups are "
        "edited there"
    ),
    "admin.LogEntry.change_message": "the names of the fields an admin changed, not their values",
    "auth.Permission.name": _SCHEMA,
    "auth.Permission.codename": _SCHEMA,
    "auth.Group.name": "a role name",
    "auth.User.password": "a salted password hash",
    "auth.User.username": "the account, not a memory value (a memory erase keeps the account)",
    "auth.User.first_name": "the account, not a memory value (a memory erase keeps the account)",
    "auth.User.last_name": "the account, not a memory value (a memory erase keeps the account)",
    "auth.User.email": "the account, not a memory value (a memory erase keeps the account)",
    "contenttypes.ContentType.app_label": _SCHEMA,
    "contenttypes.ContentType.model": _SCHEMA,
    "sessions.Session.session_key": _ID,
    "sessions.Session.session_data": (
        "a login, signed and compressed; a flash message quoting a run's goal may wait here "
        "until the next page shows it (when it does not fit the message cookie)"
    ),
    "authtoken.Token.key": "an API credential",
    # policy
    "policy.Grant.id": _ID,
    "policy.Grant.capability": _OPERATOR,
    "policy.Grant.resource_scope": "a scope from a profile's template: the subject or a prefix",
    "policy.Confirmation.id": _ID,
    "policy.Confirmation.proposal_hash": _HASH,
    "policy.Confirmation.edited_from": _ID,
    "policy.Confirmation.hash_scheme": _HASH,
    "policy.Confirmation.tool_name": "a registered tool's name",
    "policy.Confirmation.tool_version": "a registered tool's version",
    "policy.Confirmation.status": _CODE,
    "policy.Confirmation.origin": _CODE,
    "policy.Confirmation.approvers": _CODE,
    "policy.ConfirmationApproval.username": "who approved (the audit names every approver)",
    "policy.McpServer.name": _OPERATOR,
    "policy.McpServer.transport": _CODE,
    "policy.McpServer.spec": _OPERATOR,
    "policy.McpTool.name": "the tool's name as its server lists it",
    "policy.McpTool.listing": "what the server lists, for every run alike",
    "policy.McpTool.listed_pin": _HASH,
    "policy.McpTool.accepted_listing": "what the server lists, for every run alike",
    "policy.McpTool.accepted_pin": _HASH,
    "policy.McpTool.pin_scheme": _HASH,
    "policy.McpTool.policy": _OPERATOR,
    # runs
    "runs.Run.id": _ID,
    "runs.Run.subject": "whose run it is: the erase finds the runs by it",
    "runs.ModelCall.id": _ID,
    "runs.ModelCall.subject": "whose run it is (the gateway's fair turns)",
    "runs.ModelCall.endpoint": _OPERATOR,
    "runs.ModelCall.model": "the model, or the name of the tool called: the operator's",
    "runs.ModelCall.request_hash": _HASH,
    "runs.ModelCall.hash_scheme": _HASH,
    "runs.ModelCall.hints": "tool versions and observation ids the runtime made",
    "runs.ModelCall.summary": "counts and preference keys of the planner's context, no values",
    "runs.ModelCall.kind": _CODE,
    "runs.ModelCall.status": _CODE,
    "runs.ModelCall.failure": "a PLANNER_* code and an HTTP status",
    "runs.ModelCall.lease_owner": _ID,
    "runs.CallAttempt.owner": _ID,
    "runs.CallAttempt.outcome": _CODE,
    "runs.Run.status": _CODE,
    "runs.Run.pending_confirmation_id": _ID,
    "runs.Run.last_observation_id": _ID,
    "runs.Run.stop_reason": _CODE,
    "runs.Run.citations": "observation ids a final answer cites (checked to exist)",
    "runs.Run.loop_guard": "fingerprints (hashes) of proposals, with counters",
    "runs.Run.budgets": "the run's limits: numbers only",
    "runs.Run.tool_policy": _OPERATOR,
    "runs.Run.faults": "a scenario's fault plan: trusted configuration",
    "runs.Run.lease_owner": "the worker holding the run",
    "runs.TraceEvent.event": _CODE,
    "runs.TraceEvent.proposal_id": _PLANNER_ID,
    # The hash chain (runs.domain.trace_chain): the erase keeps the digests the chain was built
    # on and records erased_digest itself (runs.privacy.erasure).
    "runs.TraceEvent.content_digest": _HASH,
    "runs.TraceEvent.chain_digest": _HASH,
    "runs.TraceEvent.erased_digest": _HASH,
    "runs.TraceEvent.hash_scheme": _HASH,
    "runs.Run.trace_head": _HASH,
    "runs.Observation.observation_id": _ID,
    "runs.TaintEntry.observation_id": _ID,
    "runs.TaintEntry.trust": _CODE,
    "runs.Observation.kind": _CODE,
    "runs.Observation.trust": _CODE,
    "runs.Observation.content_hash": _HASH,
    "runs.Observation.hash_scheme": _HASH,
    "runs.LedgerEntry.idempotency_token": _HASH,
    "runs.LedgerEntry.hash_scheme": _HASH,
    "runs.LedgerEntry.proposal_id": _PLANNER_ID,
    "runs.LedgerEntry.tool_name": "a registered tool's name",
    "runs.LedgerEntry.tool_version": "a registered tool's version",
    "runs.LedgerEntry.arguments_hash": _HASH,
    "runs.LedgerEntry.proposal_hash": _HASH,
    "runs.LedgerEntry.confirmation_id": _ID,
    "runs.LedgerEntry.grant_ids": _ID,
    "runs.LedgerEntry.status": _CODE,
    "runs.Artifact.sha256": _HASH,
    "runs.Artifact.idempotency_token": _HASH,
    "runs.Document.corpus": "the public corpus, loaded by operators for every run alike",
    "runs.Document.slug": "the public corpus, loaded by operators for every run alike",
    "runs.Document.title": "the public corpus, loaded by operators for every run alike",
    "runs.Document.body": "the public corpus, loaded by operators for every run alike",
    "runs.Document.sha256": _HASH,
    "runs.Handoff.reason": _CODE,
    "runs.Handoff.status": _CODE,
    "runs.FaultFiring.fault": _CODE,
    "runs.SubjectUsage.subject": "whose quota it is",
    "runs.RunProfile.name": _OPERATOR,
    "runs.RunProfile.description": _OPERATOR,
    "runs.RunProfile.audience": _CODE,
    "runs.RunProfile.planner": _OPERATOR,
    "runs.RunProfile.tools": _OPERATOR,
    "runs.RunProfile.grant_templates": _OPERATOR,
    "runs.RunProfile.budgets": _OPERATOR,
    "runs.RunProfile.tool_policy": _OPERATOR,
    # memory: the subject's own records are deleted or blanked by the memory side of the erase.
    "memory.PreferenceRecord.subject": _DELETED,
    "memory.PreferenceRecord.key": _DELETED,
    "memory.PreferenceRecord.value": _DELETED,
    "memory.PreferenceRecord.source_kind": _DELETED,
    "memory.PreferenceRecord.confirmation_id": _DELETED,
    "memory.PreferenceRecord.created_by_run": _DELETED,
    "memory.PreferenceRecord.revoke_reason": _DELETED,
    "memory.PreferenceChange.subject": _DELETED,
    "memory.PreferenceChange.key": _DELETED,
    "memory.PreferenceChange.proposed_value": _DELETED,
    "memory.PreferenceChange.proposal_hash": _DELETED,
    "memory.PreferenceChange.status": _DELETED,
    "memory.PreferenceChange.result": _DELETED,
    "memory.PreferenceHistory.value": "set to null by memory.services.preferences_erase",
    "memory.PreferenceHistory.subject": "whose history it is: the audit entry stays",
    "memory.PreferenceHistory.key": "a whitelisted key name (configuration)",
    "memory.PreferenceHistory.action": _CODE,
    "memory.PreferenceHistory.confirmation_id": _ID,
    "memory.PreferenceHistory.run_id": _ID,
    "memory.PreferenceHistory.actor": "who (a user name, run:<id> or system)",
    "memory.PreferenceHistory.idempotency_token": _HASH,
    "memory.WorkingMemoryItem.item_id": _ID,
    "memory.WorkingMemoryItem.kind": _CODE,
    "memory.WorkingMemoryItem.trust": _CODE,
    "memory.WorkingMemoryItem.source_ids": _ID,
    # notify: subscriptions are the operator's; a notification names an item, never its content
    # (notify.services.notification_record takes no argument, goal or observation).
    "notify.Subscription.kind": _CODE,
    "notify.Subscription.url": _OPERATOR,
    "notify.Subscription.secret": _OPERATOR,
    "notify.Subscription.email": _OPERATOR,
    "notify.Subscription.events": _CODE,
    "notify.Subscription.role": _CODE,
    "notify.Subscription.profile": _OPERATOR,
    "notify.Notification.kind": _CODE,
    "notify.Notification.item_id": _ID,
    "notify.Notification.run_id": _ID,
    "notify.Notification.tool_name": "a registered tool's name",
    "notify.Notification.profile": "the name of the run's profile: the operator's",
    "notify.Notification.roles": _CODE,
    "notify.Notification.link_path": "a console path built from the item's ids",
    "notify.Delivery.status": _CODE,
    "notify.Delivery.last_error": _CODE,
}


def column_name(model: type[models.Model], column: str) -> str:
    """``app_label.Model.column``, as ``NOT_REWRITTEN`` names columns."""
    return f"{model._meta.label}.{column}"


def erased_columns(places: tuple[Place, ...] = ERASED) -> list[str]:
    return [column_name(p.model, c) for p in places for c in p.columns]
