"""Persistence adapter for runs. The domain core (``runs.domain``) decides; these tables store.

Invariants live in the database, named: status checks, counter checks, unique (run, sequence),
unique idempotency token. Only ``runs.orm.store.OrmRunStore`` and ``runs.services`` write.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from policy.domain.canonical import HASH_SCHEME
from runs.domain import writes
from runs.domain.budgets import DEFAULT_MAX_TOKENS
from runs.domain.handoff import HandoffStatus
from runs.domain.ledger import LedgerStatus
from runs.domain.machine import Status
from runs.domain.profiles import AUDIENCES


class AppendOnlyError(Exception):
    """The trace is append-only: the application never updates or deletes an event."""


# ``runs.domain.writes.outcome_flag`` as a filter: a completed run with a write that did not take
# effect. The partial index ``run_outcome_flagged`` is built from this very expression (the
# database uses it only for a query that repeats its condition); tests/domain/test_writes.py and
# tests/services/test_run_outcome.py hold the two rules together.
WRITE_FIELDS = sorted(writes.FIELDS.values())
OUTCOME_FLAGGED = Q(status=Status.COMPLETED.value) & (
    Q(writes_rejected__gt=0) | Q(writes_failed__gt=0) | Q(writes_unknown__gt=0)
)


class Run(models.Model):
    id = models.CharField(primary_key=True, max_length=64)
    subject = models.CharField(max_length=128, db_index=True)
    goal = models.TextField()
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="runs",
    )
    status = models.CharField(
        max_length=32, choices=[(s.value, s.value) for s in Status], default=Status.CREATED.value
    )
    version = models.PositiveIntegerField(default=0)
    step = models.PositiveIntegerField(default=0)
    max_steps = models.PositiveIntegerField()
    tool_calls = models.PositiveIntegerField(default=0)
    max_tool_calls = models.PositiveIntegerField()
    max_repeated_proposal = models.PositiveIntegerField()
    deadline_ms = models.BigIntegerField()
    pending_proposal = models.JSONField(null=True, blank=True)
    pending_confirmation_id = models.CharField(max_length=128, null=True, blank=True)
    last_observation_id = models.CharField(max_length=64, null=True, blank=True)
    stop_reason = models.CharField(max_length=64, null=True, blank=True)
    answer = models.TextField(null=True, blank=True)
    citations = models.JSONField(default=list, blank=True)
    planner_cursor = models.PositiveIntegerField(default=0)
    # Bounded (runs.domain.step.loop_guard.MAX_TRACKED entries): the step never rewrites history.
    loop_guard = models.JSONField(default=dict, blank=True)
    knowledge_version = models.PositiveIntegerField(default=0)
    unresolved_effects = models.PositiveIntegerField(default=0)
    trace_seq = models.PositiveIntegerField(default=0)
    # The chain digest of the last trace event (runs.domain.trace_chain); "" before the first.
    # NULL: a run from before migration 0014_trace_chain, whose events carry no digests.
    trace_head = models.CharField(max_length=64, null=True, default="")
    observation_seq = models.PositiveIntegerField(default=0)
    # Model tokens (issue 12): the budget, and what the planner steps spent (may pass the budget
    # by the one step that crossed it; that step is not acted on).
    max_tokens = models.PositiveBigIntegerField(default=DEFAULT_MAX_TOKENS)
    tokens_used = models.PositiveBigIntegerField(default=0)
    planner = models.JSONField(default=dict)
    budgets = models.JSONField(default=dict)
    # The effective tool policy, recorded at creation (policy.domain.tool_policy) so the gate
    # never reads a profile edited later. {} (every run from before issue 12): contract modes.
    tool_policy = models.JSONField(default=dict, blank=True)
    # How the run's writes ended (runs.domain.writes), counted in the commits of its steps.
    # NULL: a run from before migration 0012_run_outcome, never counted (its counts would be
    # partial).
    writes_succeeded = models.PositiveIntegerField(null=True, default=0)
    writes_rejected = models.PositiveIntegerField(null=True, default=0)
    writes_failed = models.PositiveIntegerField(null=True, default=0)
    writes_unknown = models.PositiveIntegerField(null=True, default=0)
    # What the provenance index holds, in characters (policy.domain.origins.taint.budget). NULL: it
    # overflowed, or a run from before migration 0015_provenance: fail closed.
    taint_chars = models.PositiveIntegerField(null=True, default=0)
    # Fault injection plan from a scenario file (trusted configuration, never planner output).
    faults = models.JSONField(default=dict, blank=True)
    # One worker at a time (not run state: never part of the version compare-and-set).
    lease_owner = models.CharField(max_length=128, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The profile the run was started from (runs.start.profiles.run_from_profile), so "run again"
    # starts the same one under its current rules. NULL: a run given its own definition (a
    # scenario, the API's planner), or one from before migration 0017_runs_ui.
    profile = models.ForeignKey(
        "RunProfile", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in Status]), name="run_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(tool_calls__lte=F("max_tool_calls")),
                name="run_tool_calls_within_budget",
            ),
            models.CheckConstraint(
                condition=Q(step__lte=F("max_steps")), name="run_step_within_budget"
            ),
            # The write counts are kept together or not at all (runs.domain.writes.counts_of).
            models.CheckConstraint(
                condition=Q(**{f"{f}__isnull": True for f in WRITE_FIELDS})
                | Q(**{f"{f}__isnull": False for f in WRITE_FIELDS}),
                name="run_writes_counted_together",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "-created_at"], name="run_status_created"),
            # The sweeper: active runs whose lease is missing or expired.
            models.Index(fields=["status", "lease_expires_at"], name="run_status_lease"),
            # The runs list filtered by subject (and status), newest first.
            models.Index(fields=["subject", "status", "-created_at"], name="run_subject_status"),
            # The runs list's outcome filter (``?outcome_flag=writes_not_applied``), newest
            # first: only flagged runs are in it, so it stays small and the filter walks it.
            # ``status`` leads (always "completed" here) so that SQLite's planner, which has no
            # statistics, prefers it to run_status_created: it also gives the page's order.
            models.Index(
                fields=["status", "-created_at", "-id"],
                condition=OUTCOME_FLAGGED,
                name="run_outcome_flagged",
            ),
            # The runs list's stop-reason filter (``?stop_reason=``), newest first.
            models.Index(fields=["stop_reason", "-created_at"], name="run_stop_reason_created"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"

    @property
    def writes(self) -> dict[str, int] | None:
        """What the run's writes came to, by outcome (None: not counted, an older run)."""
        return writes.counts_of(self)

    @property
    def outcome_flag(self) -> str | None:
        return writes.outcome_flag(self.status, self.writes)

    @property
    def writes_not_applied(self) -> int:
        return writes.not_applied(self.writes)

    @property
    def writes_text(self) -> str:
        return writes.summary_text(self.writes)


class TraceEventQuerySet(models.QuerySet):
    """Inserts only. Every way a queryset can change or remove a row raises; a database trigger
    (migration 0007_trace_append_only_trigger) refuses a rewrite of an event's identity even to
    raw SQL."""

    def update(self, **kwargs):
        raise AppendOnlyError("trace events are never updated")

    def bulk_update(self, objs, fields, batch_size=None):
        raise AppendOnlyError("trace events are never updated")

    def bulk_create(self, objs, *args, **kwargs):
        # An upsert is an update of the row already there.
        if kwargs.get("update_conflicts"):
            raise AppendOnlyError("trace events are never updated")
        return super().bulk_create(objs, *args, **kwargs)

    def delete(self):
        raise AppendOnlyError("trace events are never deleted")


class TraceEvent(models.Model):
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="trace_events")
    sequence = models.PositiveIntegerField()
    event = models.CharField(max_length=64)
    proposal_id = models.CharField(max_length=128, null=True, blank=True)
    details = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    # The hash chain (runs.domain.trace_chain, scheme in ``hash_scheme``): what the event said
    # when written, and that bound to the event before it. NULL on events of runs from before
    # migration 0014_trace_chain. ``erased_digest``: the content as an erase left it.
    content_digest = models.CharField(max_length=64, null=True)
    chain_digest = models.CharField(max_length=64, null=True)
    erased_digest = models.CharField(max_length=64, null=True)
    hash_scheme = models.CharField(max_length=8, null=True)

    objects = TraceEventQuerySet.as_manager()

    class Meta:
        ordering = ["run_id", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["run", "sequence"], name="trace_run_sequence_unique"),
            models.CheckConstraint(condition=Q(sequence__gte=1), name="trace_sequence_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.sequence} {self.event}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError("trace events are never updated")
        # A new instance that carries an existing pk would otherwise UPDATE that row (Django
        # tries UPDATE first when a pk is set): an insert, or an IntegrityError.
        kwargs["force_insert"] = True
        return super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("trace events are never deleted")


class Observation(models.Model):
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="observations")
    observation_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=32)
    trust = models.CharField(max_length=32)
    step = models.PositiveIntegerField()
    content = models.JSONField()
    content_hash = models.CharField(max_length=64)
    hash_scheme = models.CharField(max_length=8, default=HASH_SCHEME)
    citable = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "observation_id"], name="observation_run_id_unique"
            ),
            models.CheckConstraint(
                condition=Q(trust__in=["trusted-tool", "untrusted-content", "policy", "user"]),
                name="observation_trust_valid",
            ),
        ]
        indexes = [
            # Loop guard: "was this content seen before in this run?" on every observation.
            models.Index(fields=["run", "content_hash"], name="observation_run_content"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.observation_id} ({self.trust})"


class TaintEntry(models.Model):
    """One observation's content in the run's provenance index (policy.domain.origins.taint): its
    untrusted parts, or a trusted tool's result, as ``normal`` text. Written in the commit of
    the observation; read by a step only past the entries a worker already holds."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="taint_entries")
    seq = models.PositiveBigIntegerField()
    observation_id = models.CharField(max_length=64)
    trust = models.CharField(max_length=32)
    text = models.TextField()

    class Meta:
        constraints = [
            # Also the index of the step's read: entries of a run past a sequence number.
            models.UniqueConstraint(fields=["run", "seq"], name="taint_entry_run_seq_unique"),
            models.CheckConstraint(
                condition=Q(trust__in=["trusted-tool", "untrusted-content"]),
                name="taint_entry_trust_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.observation_id} ({self.trust})"


# Plain strings, in the enum's order: the migrations hold exactly these values.
LEDGER_STATUSES = [s.value for s in LedgerStatus]


class LedgerEntry(models.Model):
    """One row per executable command. Intent (``started``) commits before the tool is called."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="ledger")
    idempotency_token = models.CharField(max_length=64, unique=True)
    hash_scheme = models.CharField(max_length=8, default=HASH_SCHEME)
    proposal_id = models.CharField(max_length=128)
    tool_name = models.CharField(max_length=128)
    tool_version = models.CharField(max_length=32)
    arguments_hash = models.CharField(max_length=64)
    proposal_hash = models.CharField(max_length=64)
    # The validated arguments, kept so a recovery re-issues the *same* command, never re-plans.
    arguments = models.JSONField()
    resource = models.CharField(max_length=512, null=True, blank=True)
    deadline_ms = models.BigIntegerField()
    confirmation_id = models.CharField(max_length=128, null=True, blank=True)
    grant_ids = models.JSONField(default=list)
    step = models.PositiveIntegerField()
    status = models.CharField(max_length=32, default=LedgerStatus.STARTED.value)
    outcome = models.JSONField(null=True, blank=True)
    verification = models.JSONField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        # Django's own plural would read "ledger entrys" in the admin.
        verbose_name_plural = "ledger entries"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=LEDGER_STATUSES), name="ledger_status_valid"
            ),
            models.CheckConstraint(condition=Q(attempt__gte=1), name="ledger_attempt_positive"),
        ]
        indexes = [
            # "Is a tool active for this run?" (cancel) and the sweeper's scan for started rows.
            models.Index(fields=["run", "status"], name="ledger_run_status"),
            # The runs list's tool filter: the runs with an entry of this tool
            # (``runs.selectors.runs_filtered``), answered from this index alone.
            models.Index(fields=["tool_name", "run"], name="ledger_tool_run"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name}@{self.tool_version} {self.status} {self.idempotency_token[:12]}"


class Artifact(models.Model):
    """A file written by ``write_artifact`` under the run-output root, with its content hash."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="artifacts")
    path = models.CharField(max_length=512)
    sha256 = models.CharField(max_length=64)
    size = models.PositiveIntegerField()
    idempotency_token = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.path}"


class Document(models.Model):
    """The public corpus ``search_public`` searches. Its text is untrusted content."""

    corpus = models.CharField(max_length=64, default="public")
    slug = models.SlugField(max_length=128)
    title = models.CharField(max_length=256)
    body = models.TextField()
    sha256 = models.CharField(max_length=64)
    loaded_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["corpus", "slug"]
        constraints = [
            models.UniqueConstraint(fields=["corpus", "slug"], name="document_corpus_slug_unique")
        ]

    def __str__(self) -> str:
        return f"{self.corpus}/{self.slug}"


class Handoff(models.Model):
    """A run handed to a person (seed §14), resolved only by ``runs.people.handoffs``."""

    STATUSES = tuple(s.value for s in HandoffStatus)

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="handoffs")
    reason = models.CharField(max_length=64)
    status = models.CharField(max_length=16, default=HandoffStatus.OPEN.value)
    bundle = models.JSONField()
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolution = models.JSONField(null=True, blank=True)
    opened_at = models.DateTimeField(auto_now_add=True, db_index=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in HandoffStatus]),
                name="handoff_status_valid",
            ),
            # A run has at most one unresolved handoff: reviewers never race on two bundles.
            models.UniqueConstraint(
                fields=["run"],
                condition=~Q(status=HandoffStatus.RESOLVED.value),
                name="handoff_one_open_per_run",
            ),
        ]
        indexes = [models.Index(fields=["status", "-opened_at"], name="handoff_inbox")]

    def __str__(self) -> str:
        return f"handoff {self.pk} {self.reason} ({self.status})"

    @property
    def claimant_name(self) -> str | None:
        """The user name of who claimed it, or None (unclaimed, or claimed by no account)."""
        return self.assignee.get_username() if self.assignee is not None else None


class FaultFiring(models.Model):
    """A fault that must fire once (a worker crash) records that it fired, before it fires."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="+")
    fault = models.CharField(max_length=64)
    fired_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "fault"], name="fault_fires_once_per_run")
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.fault}"


class SubjectUsage(models.Model):
    """Per-subject limits (runs.start.limits): one row per subject.

    Creating a run locks this row so concurrent creates count the subject's active runs one
    after the other; the runner spends the daily step quota on it by compare-and-set. Only the
    current day is kept: a new day resets ``steps`` in the same UPDATE.
    """

    subject = models.CharField(primary_key=True, max_length=128)
    day = models.DateField()
    steps = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(steps__gte=0), name="subject_usage_steps_nonneg"),
        ]

    def __str__(self) -> str:
        return f"{self.subject}: {self.steps} steps on {self.day}"


class RunProfile(models.Model):
    """What an operator lets users start (runs.start.profiles; rules: runs.domain.profiles): a
    planner, the tools it may use, grant templates (``{subject}`` in scopes), budgets, and who may
    use it.

    Written only by ``runs.start.profiles`` services, checked by the domain first. ``version`` is
    the compare-and-set of an edit (two operators editing one profile: the second gets a conflict).
    Archived profiles stay (runs started from them name them) but nobody can start one.
    """

    name = models.CharField(max_length=63, unique=True)
    description = models.TextField(blank=True, default="")
    audience = models.CharField(max_length=16, choices=[(a, a) for a in AUDIENCES], default="all")
    users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+")
    groups = models.ManyToManyField("auth.Group", blank=True, related_name="+")
    planner = models.JSONField(default=dict)
    tools = models.JSONField(default=list)
    grant_templates = models.JSONField(default=list)
    budgets = models.JSONField(default=dict)
    # Per tool: confirmation policy, auto constraints, approvers; only tightens the deployment's.
    tool_policy = models.JSONField(default=dict, blank=True)
    version = models.PositiveIntegerField(default=1)
    archived_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )  # fmt: skip
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )  # fmt: skip
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(audience__in=AUDIENCES),
                name="run_profile_audience_valid",
            ),
            models.CheckConstraint(condition=Q(version__gte=1), name="run_profile_version_pos"),
        ]

    def __str__(self) -> str:
        return self.name


# The records of calls runs wait on live beside the code that writes them (runs.calls); they are
# this app's models, imported here so that Django finds them.
from runs.calls.models import CallAttempt, ModelCall  # noqa: E402, F401
