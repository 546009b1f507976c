"""Reads for the console's runs pages (runs/views/runs.py): the runs list with its keyset
pagination and counts, and everything the run detail shows, each in a fixed number of queries.

Visibility is the API's rule (``runs.selectors.runs_visible`` / ``access_run``): a user sees
their own runs and those started for them (subject = their name); operators, reviewers and admins
see all; a foreign run is NOT_FOUND.
"""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Q

from agentconsole.kernel.pages import pretty_json
from agentconsole.kernel.roles import is_operator
from policy.domain.errors import DomainError
from runs import models as m
from runs import selectors
from runs.domain.console.next_steps import NextSteps, next_steps
from runs.domain.console.timeline import StepGroup, build_timeline
from runs.domain.handoff import HandoffStatus
from runs.domain.machine import TERMINAL, Status
from runs.domain.trace_chain import Verdict
from runs.models import WRITE_FIELDS
from runs.start import profiles
from runs.trace.trace_checks import trace_verify

PAGE_SIZE = 50
# The detail renders at most this many trace events (the latest); the API pages the rest.
TRACE_LIMIT = 2000
STATUSES = tuple(s.value for s in Status)


class CursorInvalid(DomainError):
    def __init__(self) -> None:
        super().__init__("The page cursor is not one this list gave out.", code="CURSOR_INVALID")


# -- the runs list -------------------------------------------------------------------------


def cursor_encode(created_at: datetime, run_id: str) -> str:
    raw = f"{created_at.isoformat()}|{run_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) a cursor points after; CURSOR_INVALID for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, run_id = raw.split("|", 1)
        created_at = datetime.fromisoformat(stamp)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise CursorInvalid() from None
    if created_at.tzinfo is None or not run_id or len(run_id) > 64:
        raise CursorInvalid()
    return created_at, run_id


@dataclass(frozen=True)
class RunsPage:
    rows: list[m.Run]
    next_cursor: str | None
    counts: dict[str, int]
    total: int


# What a refused filter form shows: no rows, no counts (nothing was read).
EMPTY_PAGE = RunsPage(rows=[], next_cursor=None, counts=dict.fromkeys(STATUSES, 0), total=0)


def runs_page(
    *,
    user: Any,
    status: str = "",
    subject: str = "",
    text: str = "",
    outcome_flag: str = "",
    created_from: datetime | None = None,
    created_before: datetime | None = None,
    tool: str = "",
    stop_reason: str = "",
    after: tuple[datetime, str] | None = None,
    size: int = PAGE_SIZE,
) -> RunsPage:
    """One page of the runs ``user`` may see, newest first, and the counts by status.

    Two queries whatever the page: the counts (by status, under the subject and text filters,
    so each status link says what it would show) and the page itself. Keyset pagination on
    (created_at, id): ``created_at <= t AND (created_at < t OR id < i)`` keeps the bound on the
    indexed column, so the database walks the index from the cursor and stops after a page,
    however deep the page is (an OFFSET would read and drop every row before it).
    ``outcome_flag`` (``writes_not_applied``) keeps the flagged runs only: the condition of a
    partial index that holds only them, so that page walks a small index too. The time range,
    tool and stop reason are ``selectors.runs_filtered``'s (subqueries, still two queries).
    """
    qs = selectors.runs_visible(user=user)
    if subject:
        qs = qs.filter(subject=subject)
    if text:
        qs = qs.filter(goal__icontains=text)
    if outcome_flag:
        qs = selectors.runs_flagged(qs)
    qs = selectors.runs_filtered(
        qs,
        created_from=created_from,
        created_before=created_before,
        tool=tool,
        stop_reason=stop_reason,
    )
    # count(*), not count(id): PostgreSQL answers it from the status index alone (index-only).
    counts = dict(
        qs.order_by().values_list("status").annotate(n=Count("*")).values_list("status", "n")
    )
    if status:
        qs = qs.filter(status=status)
    if after is not None:
        at, run_id = after
        qs = qs.filter(created_at__lte=at).filter(Q(created_at__lt=at) | Q(id__lt=run_id))
    rows = list(
        qs.select_related("owner")
        .only(
            "id", "subject", "goal", "status", "version", "step", "max_steps", "tool_calls",
            "max_tool_calls", "stop_reason", "created_at", "owner__username",
            *WRITE_FIELDS,
        )
        .order_by("-created_at", "-id")[: size + 1]
    )  # fmt: skip
    more = len(rows) > size
    rows = rows[:size]
    next_cursor = cursor_encode(rows[-1].created_at, rows[-1].pk) if more else None
    return RunsPage(
        rows=rows,
        next_cursor=next_cursor,
        counts={s: counts.get(s, 0) for s in STATUSES},
        total=sum(counts.values()),
    )


# -- the run detail ------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    label: str
    used: int
    limit: int
    text: str

    @property
    def percent(self) -> int:
        return min(100, round(100 * self.used / self.limit)) if self.limit else 100

    @property
    def level(self) -> str:
        return "bad" if self.percent >= 100 else "warn" if self.percent >= 80 else ""


@dataclass(frozen=True)
class ObservationView:
    """An observation as the page shows it: its content as indented JSON text (escaped by the
    template like any text, never marked safe) and its trust label in words."""

    observation_id: str
    kind: str
    trust: str
    step: int
    citable: bool
    text: str
    # (part, its trust label, its text) when the tool labelled the parts of its result.
    parts: tuple[tuple[str, str, str], ...] = ()

    @property
    def untrusted(self) -> bool:
        return self.trust == "untrusted-content"

    @property
    def trust_word(self) -> str:
        return self.trust.replace("-", " ")


def _observation(o: m.Observation) -> ObservationView:
    return ObservationView(
        o.observation_id,
        o.kind,
        o.trust,
        o.step,
        o.citable,
        pretty_json(o.content),
        _parts(o.content),
    )


def _parts(content: Any) -> tuple[tuple[str, str, str], ...]:
    labels = content.get("part_trust") if isinstance(content, dict) else None
    value = content.get("value") if isinstance(content, dict) else None
    if not isinstance(labels, dict) or not isinstance(value, dict):
        return ()
    return tuple(
        (str(k), str(labels.get(k, "")), pretty_json(value[k])) for k in sorted(value, key=str)
    )


@dataclass(frozen=True)
class RunDetail:
    run: m.Run
    groups: list[StepGroup]
    events_hidden: int
    last_sequence: int
    observations: list[ObservationView]
    ledger: list[m.LedgerEntry]
    artifacts: list[m.Artifact]
    handoff: m.Handoff | None
    budgets: list[Budget]
    now_ms: int
    finished: bool
    may_cancel: bool
    # Whether the trace's hash chain verifies (runs.trace.trace_checks): read whole, once per view.
    trace_check: Verdict
    # What to do next, for a run that did not end as asked (runs.domain.console.next_steps).
    next: NextSteps | None = None
    # A finished run of a profile this user may still use: "Run again" (runs.start.profiles).
    may_run_again: bool = False
    # An operator may edit the run's profile (the profile pages are theirs).
    may_edit_profile: bool = False

    @property
    def citations(self) -> list[tuple[str, bool]]:
        """Each cited observation id, and whether the run has it (a link when it does)."""
        known = {o.observation_id for o in self.observations}
        return [(str(c), str(c) in known) for c in self.run.citations or []]


def budgets_of(run: m.Run, now_ms: int) -> list[Budget]:
    """Steps, tool calls and time, each with its numbers written out."""
    total_ms = int((run.budgets or {}).get("deadline_ms") or 0)
    if run.status in TERMINAL:
        # The run's last write is its stop: the time it took, near enough.
        used_ms = int((run.updated_at - run.created_at).total_seconds() * 1000)
        left_ms = max(0, total_ms - used_ms)
        time_text = f"finished after {used_ms / 1000:.1f} s of {total_ms // 1000} s"
    else:
        left_ms = max(0, run.deadline_ms - now_ms)
        time_text = f"{left_ms // 1000} s left of {total_ms // 1000} s"
    return [
        Budget("Steps", run.step, run.max_steps, f"{run.step} of {run.max_steps}"),
        Budget(
            "Tool calls",
            run.tool_calls,
            run.max_tool_calls,
            f"{run.tool_calls} of {run.max_tool_calls}",
        ),
        *_token_budget(run),
        # Last: the page's countdown script reads the last budget as the time one.
        Budget("Time", max(0, total_ms - left_ms), total_ms, time_text),
    ]


def _token_budget(run: m.Run) -> list[Budget]:
    """Model tokens, once a model planner spent any (a fixture run never does)."""
    if not run.tokens_used:
        return []
    text = f"{run.tokens_used} of {run.max_tokens}"
    return [Budget("Model tokens", run.tokens_used, run.max_tokens, text)]


def _trace(run: m.Run) -> tuple[list[dict[str, Any]], int]:
    """The latest TRACE_LIMIT events in order, and how many earlier ones are not shown."""
    latest = m.TraceEvent.objects.filter(run=run).order_by("-sequence")
    rows: list[dict[str, Any]] = [
        dict(row)
        for row in latest.values("sequence", "event", "proposal_id", "details")[:TRACE_LIMIT]
    ]
    rows.reverse()
    hidden = int(rows[0]["sequence"]) - 1 if rows else 0
    return rows, hidden


def may_cancel(*, user: Any, run: m.Run) -> bool:
    """The API's rule (``runs.selectors.may_act_on_run``), while the run has not finished."""
    return selectors.may_act_on_run(user=user, run=run) and run.status not in TERMINAL


def _after(*, user: Any, run: m.Run, handoff: m.Handoff | None) -> dict[str, Any]:
    """What the page offers once the run has finished: the next-steps box, "Run again" (one
    query: is the run's profile still one this user may use), "Edit the profile"."""
    if run.status not in TERMINAL:
        return {}
    again = run.profile_id is not None and (
        profiles.profiles_usable_by(user=user).filter(pk=run.profile_id).exists()
    )
    return {
        "next": next_steps(
            status=run.status,
            stop_reason=run.stop_reason,
            outcome_flag=run.outcome_flag,
            handed_off=handoff is not None,
        ),
        "may_run_again": again,
        "may_edit_profile": run.profile_id is not None and is_operator(user),
    }


def run_detail(*, user: Any, run_id: str) -> RunDetail:
    """Everything the run detail shows, in seven queries whatever the run's length: the run, its
    trace, observations, ledger, artifacts, open handoff and the whole trace's chain check (no
    per-row query; the check reads every event once, streamed); one more once it has finished
    and names a profile (``_after``)."""
    run = selectors.access_run(user=user, run_id=run_id)
    events, hidden = _trace(run)
    now_ms = int(time.time() * 1000)
    handoff = (
        m.Handoff.objects.filter(run=run)
        .exclude(status=HandoffStatus.RESOLVED)
        .only("id", "reason", "status", "run_id")
        .first()
    )
    return RunDetail(
        run=run,
        groups=build_timeline(events),
        events_hidden=hidden,
        last_sequence=events[-1]["sequence"] if events else 0,
        observations=[
            _observation(o) for o in m.Observation.objects.filter(run=run).order_by("id")
        ],
        ledger=list(
            m.LedgerEntry.objects.filter(run=run)
            .order_by("id")
            .defer("arguments", "outcome", "verification")
        ),
        artifacts=list(m.Artifact.objects.filter(run=run).order_by("id")),
        handoff=handoff,
        budgets=budgets_of(run, now_ms),
        now_ms=now_ms,
        finished=run.status in TERMINAL,
        may_cancel=may_cancel(user=user, run=run),
        trace_check=trace_verify(run=run),
        **_after(user=user, run=run, handoff=handoff),
    )
