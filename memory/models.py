"""Long-term memory records (seed §2.3, §9) and their full history.

A record is written only by ``memory.services`` through the write protocol; every version is kept
in ``PreferenceHistory``; revocation keeps a tombstone.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from memory.domain.preferences import ChangeStatus

# Versions are PositiveIntegerField: a larger number is bad input (forms, API), not a 500.
MAX_VERSION = 2**31 - 1


class PreferenceRecord(models.Model):
    subject = models.CharField(max_length=128)
    key = models.CharField(max_length=64)
    value = models.CharField(max_length=512)
    source_kind = models.CharField(max_length=32, default="user-confirmation")
    confirmation_id = models.CharField(max_length=128)
    version = models.PositiveIntegerField(default=1)
    created_by_run = models.CharField(max_length=64, null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoke_reason = models.CharField(max_length=256, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["subject", "key"]
        constraints = [
            models.UniqueConstraint(
                fields=["subject", "key"], name="preference_subject_key_unique"
            ),
            models.CheckConstraint(
                condition=Q(source_kind="user-confirmation"), name="preference_source_is_user"
            ),
            models.CheckConstraint(condition=Q(version__gte=1), name="preference_version_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.subject}:{self.key} v{self.version}"


HISTORY_ACTIONS = ["write", "revoke", "purge", "erase"]


class PreferenceHistory(models.Model):
    record = models.ForeignKey(
        PreferenceRecord, null=True, on_delete=models.SET_NULL, related_name="history"
    )
    subject = models.CharField(max_length=128, db_index=True)
    key = models.CharField(max_length=64)
    # Null after an erasure: the audit entry stays, the value does not.
    value = models.CharField(max_length=512, null=True, blank=True)
    version = models.PositiveIntegerField()
    action = models.CharField(max_length=16)
    confirmation_id = models.CharField(max_length=128, null=True, blank=True)
    run_id = models.CharField(max_length=64, null=True, blank=True)
    # Who: a username, "run:<id>" for a confirmed tool write, "system" for retention.
    actor = models.CharField(max_length=150, blank=True, default="")
    # Why (a revocation's reason, "erased by the subject"...): the audit trail says it in words.
    reason = models.CharField(max_length=256, blank=True, default="")
    # A tool write under the same idempotency token is recorded once (a retried call is a no-op).
    idempotency_token = models.CharField(max_length=64, null=True, blank=True, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["subject", "key", "version", "id"]
        # One row is an entry of the history; Django's own plural would be "preference historys".
        verbose_name = "preference history entry"
        verbose_name_plural = "preference history"
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=HISTORY_ACTIONS), name="history_action_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject}:{self.key} v{self.version} {self.action}"


class WorkingMemoryItem(models.Model):
    """One item of a run's working memory: bounded (memory.domain.working caps), derived from
    observations, discardable — ``memory.services.working_memory_rebuild`` recreates it."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="working_items")
    item_id = models.CharField(max_length=80)
    kind = models.CharField(max_length=32)
    content = models.TextField()
    trust = models.CharField(max_length=32)
    source_ids = models.JSONField(default=list)
    created_at_step = models.PositiveIntegerField()
    expires_after_step = models.PositiveIntegerField(null=True, blank=True)
    seq = models.PositiveIntegerField()

    class Meta:
        ordering = ["created_at_step", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "item_id"], name="working_item_unique")
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.item_id}"

    @classmethod
    def from_item(cls, run_id: str, item: Any) -> WorkingMemoryItem:
        """A row for a ``memory.domain.working.WorkingItem`` (the step and the rebuild agree)."""
        return cls(
            run_id=run_id,
            item_id=item.item_id,
            kind=item.kind,
            content=item.content,
            trust=item.trust,
            source_ids=list(item.source_ids),
            created_at_step=item.created_at_step,
            expires_after_step=item.expires_after_step,
            seq=item.seq,
        )


class PreferenceChange(models.Model):
    """A user's own edit of a preference, waiting for their confirmation of the exact value.

    The confirmation is bound to ``proposal_hash`` (key, value, subject, expected version): a
    confirmation shown for one value can never apply another.
    """

    STATUSES = tuple(s.value for s in ChangeStatus)

    subject = models.CharField(max_length=128, db_index=True)
    key = models.CharField(max_length=64)
    proposed_value = models.CharField(max_length=512)
    expected_version = models.PositiveIntegerField(null=True, blank=True)
    proposal_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=16, default=ChangeStatus.PENDING.value)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in ChangeStatus]),
                name="preference_change_status_valid",
            )
        ]

    def __str__(self) -> str:
        return f"{self.subject}:{self.key} → {self.proposed_value} ({self.status})"
