"""The records of calls runs wait on (runs.domain.gateway.calls has the life of a call): a model
planner's requests and, since issue 22 item 4, the calls of tools that only wait (MCP tools),
one table told apart by ``kind``, so both share the gateway's claim, lease, fair turns and
per-lane limit (``endpoint``: a model endpoint's name, or ``mcp:<server>``).

Written only by ``runs.calls.records`` (the gateway's side) and ``runs.orm.writers`` (a step's
side: the request with the run's commit, the step that takes the reply, the stop that abandons
it). Invariants in the database: one call per run and step, a known status, attempts counted
from one, one row per attempt.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from policy.domain.canonical import HASH_SCHEME
from runs.domain.gateway.calls import CallKind, CallStatus


class ModelCall(models.Model):
    # runs.domain.gateway.calls.call_id (a model call), tool_call_id (a tool call)
    id = models.CharField(primary_key=True, max_length=96)
    run = models.ForeignKey("runs.Run", on_delete=models.PROTECT, related_name="model_calls")
    kind = models.CharField(
        max_length=8,
        choices=[(k.value, k.value) for k in CallKind],
        default=CallKind.MODEL.value,
    )
    step = models.PositiveIntegerField()
    # Whose turn it is: the gateway serves subjects in turn within an endpoint's limit.
    subject = models.CharField(max_length=128)
    endpoint = models.CharField(max_length=64)
    model = models.CharField(max_length=128)
    # Exactly what is sent (no API key: the gateway adds it from settings) and its hash.
    request = models.JSONField()
    request_hash = models.CharField(max_length=64)
    hash_scheme = models.CharField(max_length=16, default=HASH_SCHEME)
    # What reading the reply needs (tool versions, observation ids) and the step's summary.
    hints = models.JSONField(default=dict)
    summary = models.JSONField(default=dict)
    deadline_ms = models.BigIntegerField()
    status = models.CharField(
        max_length=16,
        choices=[(s.value, s.value) for s in CallStatus],
        default=CallStatus.QUEUED.value,
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    # Not sent before (a 429's Retry-After, a backoff): the call waits without holding a slot.
    not_before = models.DateTimeField()
    lease_owner = models.CharField(max_length=128, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The model's reply, or a tool call's outcome (runs.domain.gateway.calls.tool_reply).
    reply = models.JSONField(null=True, blank=True)
    # A tool call: when ``tools/call`` first went out (marked before it does). A call lost with
    # its gateway after this may have had its effect.
    sent_at = models.DateTimeField(null=True, blank=True)
    failure = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One model call per planner step (a tool call's id names its command and attempt).
            models.UniqueConstraint(
                fields=["run", "step"],
                condition=Q(kind=CallKind.MODEL.value),
                name="model_call_run_step_unique",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in CallStatus]),
                name="model_call_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in CallKind]), name="model_call_kind_valid"
            ),
            # A call being sent names who sends it and until when.
            models.CheckConstraint(
                condition=~Q(status=CallStatus.SENDING.value)
                | Q(lease_owner__isnull=False, lease_expires_at__isnull=False),
                name="model_call_sending_leased",
            ),
        ]
        indexes = [
            # The gateway's claim: queued calls of an endpoint that are due, oldest first.
            models.Index(
                fields=["endpoint", "not_before"],
                name="model_call_queued",
                condition=Q(status=CallStatus.QUEUED.value),
            ),
            # The claim of calls whose gateway died (a lapsed lease) and the in-flight count.
            models.Index(
                fields=["endpoint", "lease_expires_at"],
                name="model_call_sending",
                condition=Q(status=CallStatus.SENDING.value),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


class CallAttempt(models.Model):
    """One send of a call: recorded before it is sent, finished when its answer is recorded.
    An attempt with no ``finished_at`` whose call was claimed again was lost with its gateway."""

    call = models.ForeignKey(ModelCall, on_delete=models.CASCADE, related_name="attempt_rows")
    attempt = models.PositiveSmallIntegerField()
    owner = models.CharField(max_length=128)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # "answered", a PLANNER_* code, "abandoned" or "lost".
    outcome = models.CharField(max_length=64, null=True, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["call", "attempt"], name="call_attempt_unique"),
            models.CheckConstraint(condition=Q(attempt__gte=1), name="call_attempt_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.call_id}#{self.attempt}"
