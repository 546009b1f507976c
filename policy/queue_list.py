"""The confirmation queue as a compact list (issue 24 item 2): filters, search, paging, and the
risk-first order, as reads. The card of one item stays ``policy.selectors.confirmation_queue``'s.

Every read starts from the same set: pending confirmations the viewer's approver rule lets them
decide (``policy.selectors.decidable_by``), so the page, its live updates and the batch agree.
Filters are SQL on indexed columns (``confirmation_queue``: status + requested_at;
``confirmation_pending_tool``, ``confirmation_pending_hash``; the run's subject); the search is
a substring match over the pending set only (tool, goal, subject, ids), which the status index
already narrows to what waits. Paging is by offset: the pending set is small (thousands, not
millions) and the risk-first order has no single indexed key to seek on.

A page is a fixed number of queries whatever its size (``queue_page``): the rows joined to
their run; the count; the identical proposals of the page's hashes; the last approved call of
the same tool for the same subject, per row of the page; the filter choices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import (
    Case,
    Count,
    F,
    IntegerField,
    Q,
    QuerySet,
    Value,
    When,
    Window,
)
from django.db.models.functions import RowNumber

from policy.domain.canonical import per_run_confirmation_hash
from policy.domain.confirmation.confirmations import ConfirmationStatus
from policy.domain.contracts import SideEffect
from policy.domain.errors import DomainError
from policy.domain.registry import ToolRegistry
from policy.models import Confirmation as ConfirmationRow
from policy.selectors import decidable_by

PAGE_SIZE = 100
MAX_PAGE = 10_000
MAX_SEARCH = 100
MAX_CHOICES = 200  # distinct tools, subjects and profiles offered in the filter menus
# Older than: the choices of the age filter, by their GET value.
AGES = {"10m": timedelta(minutes=10), "1h": timedelta(hours=1), "1d": timedelta(days=1),
        "7d": timedelta(days=7)}  # fmt: skip
ORDERS = ("oldest", "risk")
# Risk first: the side effect classes from the most to the least harmful; a tool this
# deployment does not register ("unknown") ranks with the irreversible ones.
RISK_RANK = {
    "unknown": 0,
    SideEffect.IRREVERSIBLE.value: 0,
    SideEffect.COMPENSATABLE_WRITE.value: 1,
    SideEffect.IDEMPOTENT_WRITE.value: 2,
    SideEffect.READ.value: 3,
}
SIDE_EFFECTS = ("irreversible", "compensatable-write", "idempotent-write", "read", "unknown")
APPROVED = (ConfirmationStatus.APPROVED.value, ConfirmationStatus.CONSUMED.value)


class QueueFilterInvalid(DomainError):
    http_status = 400

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message, code="QUEUE_FILTER_INVALID", **extra)


@dataclass(frozen=True)
class QueueFilters:
    tool: str = ""
    side_effect: str = ""
    untrusted: bool | None = None  # None: either
    profile: str = ""
    subject: str = ""
    age: str = ""  # a key of AGES: waiting longer than that
    q: str = ""
    order: str = "oldest"
    page: int = 1

    def query(self, **override: Any) -> str:
        """The GET string of these filters (``page`` only when not 1), for links."""
        values = {**self.__dict__, **override}
        untrusted = values.pop("untrusted")
        pairs = [(k, str(v)) for k, v in values.items() if v not in ("", None)]
        pairs = [(k, v) for k, v in pairs if not (k == "page" and v == "1")]
        pairs = [(k, v) for k, v in pairs if not (k == "order" and v == "oldest")]
        if untrusted is not None:
            pairs.append(("untrusted", "1" if untrusted else "0"))
        return urlencode(sorted(pairs))

    @property
    def active(self) -> bool:
        return bool(self.tool or self.side_effect or self.profile or self.subject or self.age
                    or self.q or self.untrusted is not None)  # fmt: skip


def _text(params: Mapping[str, Any], name: str, limit: int = 128) -> str:
    value = str(params.get(name) or "").strip()
    if len(value) > limit or "\x00" in value:
        raise QueueFilterInvalid(f"The filter “{name}” is too long.", field=name)
    return value


def queue_filters(params: Mapping[str, Any]) -> QueueFilters:
    """The filters of a GET query (the page, its live socket, the row fragments); anything
    unknown in a closed choice is QUEUE_FILTER_INVALID (400), never ignored silently."""
    side_effect, age, order = (_text(params, n) for n in ("side_effect", "age", "order"))
    if side_effect and side_effect not in SIDE_EFFECTS:
        raise QueueFilterInvalid("No such side effect class.", field="side_effect")
    if age and age not in AGES:
        raise QueueFilterInvalid("No such age.", field="age")
    if order and order not in ORDERS:
        raise QueueFilterInvalid("No such order.", field="order")
    untrusted = {"": None, "1": True, "0": False}.get(_text(params, "untrusted"), "bad")
    if untrusted == "bad":
        raise QueueFilterInvalid("“untrusted” is 1, 0 or empty.", field="untrusted")
    raw_page = _text(params, "page") or "1"
    if not raw_page.isdigit() or not 1 <= int(raw_page) <= MAX_PAGE:
        raise QueueFilterInvalid("No such page.", field="page")
    return QueueFilters(
        tool=_text(params, "tool"),
        side_effect=side_effect,
        untrusted=untrusted if isinstance(untrusted, bool) else None,
        profile=_text(params, "profile"),
        subject=_text(params, "subject"),
        age=age,
        q=_text(params, "q", MAX_SEARCH),
        order=order or "oldest",
        page=int(raw_page),
    )


def _tools_with(registry: ToolRegistry, side_effect: str) -> Q:
    """The (name, version) pairs of ``side_effect`` as a filter; "unknown": none registered."""
    pairs = [(c.name, c.version) for c in registry if c.side_effect.value == side_effect]
    if side_effect == "unknown":
        known = Q()
        for c in registry:
            known |= Q(tool_name=c.name, tool_version=c.version)
        return ~known if len(registry) else Q()
    any_of = Q(pk__in=[])
    for name, version in pairs:
        any_of |= Q(tool_name=name, tool_version=version)
    return any_of


def _risk(registry: ToolRegistry) -> Case:
    whens = [
        When(tool_name=c.name, tool_version=c.version, then=Value(RISK_RANK[c.side_effect.value]))
        for c in registry
    ]
    return Case(*whens, default=Value(RISK_RANK["unknown"]), output_field=IntegerField())


def pending_for(viewer: Any) -> QuerySet[ConfirmationRow]:
    """Pending confirmations ``viewer`` may decide (the approver rule as SQL)."""
    return ConfirmationRow.objects.filter(
        decidable_by(viewer), status=ConfirmationStatus.PENDING.value
    )


def filtered(
    viewer: Any, registry: ToolRegistry, filters: QueueFilters, *, now: datetime
) -> QuerySet[ConfirmationRow]:
    """The viewer's pending confirmations under ``filters``, in the order they ask for."""
    qs = pending_for(viewer)
    if filters.tool:
        qs = qs.filter(tool_name=filters.tool)
    if filters.side_effect:
        qs = qs.filter(_tools_with(registry, filters.side_effect))
    if filters.untrusted is not None:
        qs = qs.filter(cites_untrusted=filters.untrusted)
    if filters.profile:
        qs = qs.filter(run__profile__name=filters.profile)
    if filters.subject:
        qs = qs.filter(run__subject=filters.subject)
    if filters.age:
        qs = qs.filter(requested_at__lte=now - AGES[filters.age])
    if filters.q:
        q = filters.q
        qs = qs.filter(
            Q(tool_name__icontains=q) | Q(run__goal__icontains=q) | Q(run__subject__icontains=q)
            | Q(pk=q) | Q(run_id=q)
        )  # fmt: skip
    if filters.order == "risk":
        # Untrusted provenance first within a class (False sorts before True: descending).
        return qs.annotate(risk=_risk(registry)).order_by(
            "risk", "-cites_untrusted", "requested_at", "id"
        )
    return qs.order_by("requested_at", "id")


@dataclass(frozen=True)
class QueueRow:
    confirmation_id: str
    run_id: str
    tool_name: str
    tool_version: str
    side_effect: str
    subject: str
    profile: str
    goal: str
    requested_at: datetime
    untrusted: bool
    # "same": the last approved call of this tool for this subject had these exact arguments;
    # "changed": it had others (the card shows the diff); "": none approved before.
    approved_before: str
    identical: int  # pending with the same tool and exact arguments hash (this one included)
    age: str  # how long it has waited, short ("4 min", "2 h", "3 d")
    sort_key: str  # the page's order as a string: the live list inserts new rows by it


@dataclass(frozen=True)
class QueuePage:
    rows: list[QueueRow]
    total: int  # pending under the filters
    all_pending: int  # pending this viewer may decide, whatever the filters
    filters: QueueFilters
    choices: dict[str, list[str]] = field(default_factory=dict)

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // PAGE_SIZE))

    @property
    def first_shown(self) -> int:
        return (self.filters.page - 1) * PAGE_SIZE + 1 if self.rows else 0

    @property
    def last_shown(self) -> int:
        return (self.filters.page - 1) * PAGE_SIZE + len(self.rows)


ROW_COLUMNS = ("id", "run_id", "tool_name", "tool_version", "proposal_hash", "hash_scheme",
               "requested_at", "cites_untrusted")  # fmt: skip


def with_row_facts(qs: QuerySet[ConfirmationRow]) -> QuerySet[ConfirmationRow]:
    """The columns a list row shows, in the rows' one query (not the proposal: the card
    reads it, for one row)."""
    return qs.only(*ROW_COLUMNS).annotate(
        run_goal=F("run__goal"),
        run_subject=F("run__subject"),
        run_profile=F("run__profile__name"),
    )


def approved_hashes(rows: Iterable[Any]) -> dict[tuple[str, str], str]:
    """The hash of the last approved call of each row's tool for its subject, by (tool,
    subject): one query for the page, the latest per pair picked by a window (a correlated
    subquery per row cost a scan of the tool's history each, and ran for every row sorted or
    skipped)."""
    pairs = {(r.tool_name, r.run_subject) for r in rows}
    if not pairs:
        return {}
    latest = (
        ConfirmationRow.objects.filter(
            status__in=APPROVED,
            tool_name__in={t for t, _ in pairs},
            run__subject__in={s for _, s in pairs},
            decided_at__isnull=False,
        )
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("tool_name"), F("run__subject")],
                order_by=[F("decided_at").desc(), F("id").desc()],
            )
        )
        .filter(rank=1)
        .values_list("tool_name", "run__subject", "proposal_hash")
    )
    return {(t, s): h for t, s, h in latest if (t, s) in pairs}


def identical_counts(viewer: Any, hashes: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Pending (tool, hash) pairs the viewer may decide that wait in more than one run."""
    wanted = {h for _tool, h in hashes}
    if not wanted:
        return {}
    rows = (
        pending_for(viewer)
        .filter(proposal_hash__in=wanted)
        .values("proposal_hash", "tool_name")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    return {f"{r['tool_name']}|{r['proposal_hash']}": r["n"] for r in rows}


def groupable(row: Any) -> bool:
    """A per-run confirmation's hash names the tool, not a call: equal in every run, so it is
    no proof that two proposals are the same and is never decided in a batch."""
    return row.proposal_hash != per_run_confirmation_hash(
        row.tool_name, row.tool_version, row.hash_scheme
    )


def sort_key(row: Any, order: str, side_effect: str) -> str:
    when = row.requested_at.astimezone(UTC).strftime("%Y%m%d%H%M%S%f")
    if order == "risk":
        return f"{RISK_RANK.get(side_effect, 0)}|{0 if row.cites_untrusted else 1}|{when}|{row.pk}"
    return f"{when}|{row.pk}"


def side_effect_of(registry: ToolRegistry, row: Any) -> str:
    contract = registry.contract(row.tool_name, row.tool_version)
    return contract.side_effect.value if contract else "unknown"


def age_text(waited: timedelta) -> str:
    minutes = int(waited.total_seconds() // 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h" if minutes < 48 * 60 else f"{minutes // (24 * 60)} d"


def rows_of(
    rows: Iterable[Any],
    registry: ToolRegistry,
    order: str,
    identical: Mapping[str, int],
    approved: Mapping[tuple[str, str], str],
    now: datetime,
) -> list[QueueRow]:
    out: list[QueueRow] = []
    for row in rows:
        effect = side_effect_of(registry, row)
        before = approved.get((row.tool_name, row.run_subject), "")
        out.append(
            QueueRow(
                confirmation_id=row.pk,
                run_id=row.run_id,
                tool_name=row.tool_name,
                tool_version=row.tool_version,
                side_effect=effect,
                subject=row.run_subject,
                profile=row.run_profile,
                goal=row.run_goal[:160],
                requested_at=row.requested_at,
                untrusted=row.cites_untrusted,
                approved_before=("same" if before == row.proposal_hash else "changed")
                if before
                else "",
                identical=identical.get(f"{row.tool_name}|{row.proposal_hash}", 1)
                if groupable(row)
                else 1,
                sort_key=sort_key(row, order, effect),
                age=age_text(now - row.requested_at),
            )
        )
    return out


def _choices(viewer: Any) -> dict[str, list[str]]:
    """What the filter menus offer: the tools, subjects and profiles of what waits (one query)."""
    triples = (
        pending_for(viewer)
        .values_list("tool_name", "run__subject", "run__profile__name")
        .distinct()[: MAX_CHOICES * 10]
    )
    tools: set[str] = set()
    subjects: set[str] = set()
    profiles: set[str] = set()
    for tool, subject, profile in triples:
        tools.add(tool)
        subjects.add(subject)
        if profile:
            profiles.add(profile)
    return {
        "tool": sorted(tools)[:MAX_CHOICES],
        "subject": sorted(subjects)[:MAX_CHOICES],
        "profile": sorted(profiles)[:MAX_CHOICES],
    }


def queue_page(
    *, viewer: Any, registry: ToolRegistry, filters: QueueFilters, now: datetime
) -> QueuePage:
    """One page of the viewer's queue under ``filters`` (PAGE_SIZE rows), with its counts and
    the filter menus: six queries at most whatever the page's or the queue's size."""
    qs = filtered(viewer, registry, filters, now=now)
    start = (filters.page - 1) * PAGE_SIZE
    rows = list(with_row_facts(qs)[start : start + PAGE_SIZE])
    total = qs.count() if (rows and len(rows) == PAGE_SIZE) or start else start + len(rows)
    all_pending = total if not filters.active else pending_for(viewer).count()
    identical = identical_counts(viewer, [(r.tool_name, r.proposal_hash) for r in rows])
    approved = approved_hashes(rows)
    return QueuePage(
        rows=rows_of(rows, registry, filters.order, identical, approved, now),
        total=total,
        all_pending=all_pending,
        filters=filters,
        choices=_choices(viewer),
    )


def queue_rows(
    *, viewer: Any, registry: ToolRegistry, filters: QueueFilters, ids: Iterable[str], now: datetime
) -> list[QueueRow]:
    """The rows of ``ids`` still waiting under ``filters`` (the live list fetches the rows a
    socket announced), in the filters' order."""
    wanted = list(dict.fromkeys(ids))[:PAGE_SIZE]
    qs = filtered(viewer, registry, filters, now=now).filter(pk__in=wanted)
    rows = list(with_row_facts(qs))
    identical = identical_counts(viewer, [(r.tool_name, r.proposal_hash) for r in rows])
    return rows_of(rows, registry, filters.order, identical, approved_hashes(rows), now)


LIVE_MAX = 50  # rows announced in one frame; more wait for the next push
# A row is stamped when its transaction starts its insert and seen once it commits: the live
# read looks back this far past ``since`` (ids already known are skipped), so a slow commit
# stamped before the last read is still announced.
LIVE_SLACK = timedelta(seconds=30)


@dataclass(frozen=True)
class QueueChanges:
    # Safe fields only (what a websocket frame may carry): ids, the tool's name, its class,
    # the untrusted flag and the row's sort key; never an argument value.
    added: list[dict[str, Any]]
    # Each left the queue: its id, run, tool and what became of it, said in words.
    removed: list[dict[str, Any]]


def _said(status: str, by: str) -> str:
    if status == ConfirmationStatus.PENDING.value:
        return "no longer yours to decide"
    if status in (ConfirmationStatus.APPROVED.value, ConfirmationStatus.CONSUMED.value):
        return f"decided elsewhere: approved by {by}" if by else "decided elsewhere: approved"
    if status == ConfirmationStatus.DECLINED.value:
        return f"decided elsewhere: declined by {by}" if by else "decided elsewhere: declined"
    return "expired (the run ended or passed its step)"


def queue_changes(
    *,
    viewer: Any,
    registry: ToolRegistry,
    filters: QueueFilters,
    known: set[str],
    since: datetime,
    now: datetime,
) -> QueueChanges:
    """What changed in the viewer's list since ``since``: the rows now waiting under
    ``filters`` that ``known`` (the ids the page shows) lacks, and the known ones that left.
    Two queries, each bounded (LIVE_MAX new rows; ``known`` is the page's ids)."""
    fresh = (
        filtered(viewer, registry, filters, now=now)
        .filter(requested_at__gte=since - LIVE_SLACK)
        .exclude(pk__in=known)
        .order_by("requested_at", "id")
        .only("id", "run_id", "tool_name", "tool_version", "requested_at", "cites_untrusted")
    )
    added: list[dict[str, Any]] = []
    for row in fresh[:LIVE_MAX]:
        effect = side_effect_of(registry, row)
        added.append(
            {
                "id": row.pk,
                "run_id": row.run_id,
                "tool_name": row.tool_name,
                "side_effect": effect,
                "untrusted": row.cites_untrusted,
                "sort_key": sort_key(row, filters.order, effect),
            }
        )
    gone = (
        ConfirmationRow.objects.filter(pk__in=known)
        .exclude(pk__in=pending_for(viewer).filter(pk__in=known).values("pk"))
        .values_list("pk", "run_id", "tool_name", "status", "decided_by__username")
    )
    removed = [
        {"id": pk, "run_id": run_id, "tool_name": tool, "note": _said(status, by or "")}
        for pk, run_id, tool, status, by in gone
    ]
    return QueueChanges(added=added, removed=removed)
