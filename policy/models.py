"""Grants and confirmations: the trusted evidence the gate reads. Never written from a proposal."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from policy.domain.canonical import HASH_SCHEME
from policy.domain.confirmation.approvers import DEFAULT_RULE, ApproverRule
from policy.domain.confirmation.confirmations import ConfirmationStatus


class Grant(models.Model):
    id = models.CharField(primary_key=True, max_length=128)
    run = models.ForeignKey("runs.Run", on_delete=models.PROTECT, related_name="grants")
    capability = models.CharField(max_length=64)
    resource_scope = models.CharField(max_length=512)
    expires_at_step = models.PositiveIntegerField()
    max_calls = models.PositiveIntegerField(null=True, blank=True)
    calls_used = models.PositiveIntegerField(default=0)
    constraints = models.JSONField(default=dict, blank=True)
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(max_calls__isnull=True) | Q(calls_used__lte=models.F("max_calls")),
                name="grant_calls_within_max",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.capability} on {self.resource_scope} ({self.run_id})"


class Confirmation(models.Model):
    id = models.CharField(primary_key=True, max_length=128)
    run = models.ForeignKey("runs.Run", on_delete=models.PROTECT, related_name="confirmations")
    proposal_hash = models.CharField(max_length=64)
    hash_scheme = models.CharField(max_length=8, default=HASH_SCHEME)
    tool_name = models.CharField(max_length=128)
    tool_version = models.CharField(max_length=32)
    proposal = models.JSONField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=[(s.value, s.value) for s in ConfirmationStatus]
    )
    expires_at_step = models.PositiveIntegerField()
    cites_untrusted = models.BooleanField(default=False)
    origin = models.CharField(max_length=16, default="runtime")  # runtime | scenario
    requested_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # What the person wrote with their decision (console and API; secrets masked).
    decision_reason = models.TextField(blank=True, default="")
    # Who may decide it (policy.domain.confirmation.approvers), chosen by the gate when it was
    # requested.
    approvers = models.CharField(
        max_length=32,
        choices=[(r.value, r.value) for r in ApproverRule],
        default=DEFAULT_RULE.value,
    )
    # A person's edit (issue 24 item 1): the confirmation this one's proposal was edited from
    # ("" when the planner proposed it), and what changed: [{path, op, from, to}], values as
    # the editor was shown them and typed them, secrets masked.
    edited_from = models.CharField(max_length=128, blank=True, default="")
    edit_diff = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in ConfirmationStatus]),
                name="confirmation_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(approvers__in=[r.value for r in ApproverRule]),
                name="confirmation_approvers_valid",
            ),
            # The runtime asks at most once per proposal hash at a time: a second open request
            # for the same hash would let two clicks authorize one proposal twice.
            models.UniqueConstraint(
                fields=["run", "proposal_hash"],
                condition=Q(status=ConfirmationStatus.PENDING.value),
                name="confirmation_one_pending_per_hash",
            ),
        ]
        indexes = [
            # The operator queue: pending confirmations, newest first.
            models.Index(fields=["status", "-requested_at"], name="confirmation_queue"),
            # The runs list's tool filter: runs with a proposal of this tool that asked for a
            # confirmation (``policy.selectors.runs_with_tool_confirmations``).
            models.Index(fields=["tool_name", "run"], name="confirmation_tool_run"),
            # The queue filtered by tool (``?tool=``), oldest first (policy.queue_list).
            models.Index(
                fields=["status", "tool_name", "requested_at"], name="confirmation_pending_tool"
            ),
            # Identical proposals waiting in several runs: pending with one hash (queue_list).
            models.Index(fields=["status", "proposal_hash"], name="confirmation_pending_hash"),
            # The last approved call of a tool for a subject: queue_list.approved_hashes,
            # queue_similar.approved_before.
            models.Index(
                fields=["tool_name", "status", "-decided_at"], name="confirmation_tool_decided"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.tool_name} {self.status}"


class McpServer(models.Model):
    """An MCP server an operator registered (policy.mcp_services). The spec holds secret *names*
    only; ``AGENTCONSOLE_MCP_SECRETS`` holds their values."""

    name = models.CharField(max_length=32, unique=True)
    transport = models.CharField(max_length=8, choices=[("stdio", "stdio"), ("http", "http")])
    # The validated McpServerSpec as JSON (command/args/env_secrets or url/header_secrets).
    spec = models.JSONField()
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    listed_at = models.DateTimeField(null=True, blank=True)
    # Bumped by every change to the server or its tools: the registry's cache key (wiring).
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(transport__in=["stdio", "http"]), name="mcp_server_transport_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.transport})"


class McpTool(models.Model):
    """One tool of a server: what it listed last, and what an operator accepted (the pin)."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=64)
    # The last tools/list entry seen, and its pin; null/empty once the server stops listing it.
    listing = models.JSONField(null=True, blank=True)
    listed_pin = models.CharField(max_length=64, blank=True, default="")
    # What the operator accepted: the entry, its pin and the policy (McpToolPolicy as JSON).
    accepted_listing = models.JSONField(null=True, blank=True)
    accepted_pin = models.CharField(max_length=64, blank=True, default="")
    pin_scheme = models.CharField(max_length=8, default=HASH_SCHEME)
    policy = models.JSONField(null=True, blank=True)
    # The contract's version: +1 each time a different listing is accepted, so a confirmation
    # or an idempotency token of the old tool never covers the new one.
    revision = models.PositiveIntegerField(default=0)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["server_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="mcp_tool_unique_name"),
            # Accepted means all three at once: the entry, its pin and a policy.
            models.CheckConstraint(
                condition=(
                    Q(accepted_pin="", accepted_listing__isnull=True, policy__isnull=True)
                    | (
                        ~Q(accepted_pin="")
                        & Q(accepted_listing__isnull=False, policy__isnull=False)
                    )
                ),
                name="mcp_tool_accepted_whole",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.server_id}/{self.name}"


class ConfirmationApproval(models.Model):
    """One person's approval of a confirmation: every approver is named (issue 12 item 3), the
    one of a one-approver rule as each of a four-eyes pair. Written only by
    ``policy.services.confirmation_approval_record``, in the run's commit."""

    confirmation = models.ForeignKey(
        Confirmation, on_delete=models.CASCADE, related_name="approvals"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # The name as recorded in the trace (kept if the user row goes).
    username = models.CharField(max_length=150)
    reason = models.TextField(blank=True, default="")
    # An operator with no stake in the run when they approved: what four eyes needs one of.
    independent = models.BooleanField(default=False)
    approved_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["approved_at", "id"]
        constraints = [
            # Four eyes are two people: one person approving twice is refused by the service
            # (ALREADY_APPROVED_BY_YOU) and, if a race got past it, by the database.
            models.UniqueConstraint(
                fields=["confirmation", "user"],
                condition=Q(user__isnull=False),
                name="approval_one_per_person",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.confirmation_id} approved by {self.username}"
