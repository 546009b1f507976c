"""The trace's hash chain (issue 23 item 5): linking a commit's events, and checking a run's.

Each event stores its content digest (what it says: ``canonical.trace_event_digest``) and its
chain digest (that content bound to the chain digest of the event before it:
``canonical.trace_link``); the run keeps the chain digest of its last event as its head
(``RunState.trace_head``). A commit links its events from the head it was decided on, and the
run's compare-and-set on its version makes that head the current one: two writers can never
link to the same head (the second matches no row and writes nothing). Linking costs two hashes
per event and reads nothing.

An erase rewrites event details (``runs.privacy.erasure``) and keeps each content digest: it records
the digest of the rewritten content beside it (``erased_digest``), and its own
``run.values-erased`` event seals the list of rewritten events (``canonical.trace_erase_seal``).
The chain runs over the kept content digests, so it still verifies; an edit made to look like
an erase does not match the last seal.

What it cannot see: a chain anyone can recompute is evidence against edits that do not rewrite
the chain from the edit on, and against truncation only while the run's head is kept apart
from the rows (a copy of the heads elsewhere, ``manage.py verify_trace --heads``). Event times
(``created_at``) are not in the digest (Django sets them at insert); the trigger of runs
migration 0007 refuses rewriting them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from policy.domain.canonical import TRACE_SCHEME, trace_erase_seal, trace_event_digest, trace_link
from runs.domain.trace import RUN_VALUES_ERASED, TraceDraft

GENESIS = ""
"""The head of a chained run that has no event yet (``None``: a run from before the chain)."""


@dataclass(frozen=True)
class Link:
    content_digest: str
    chain_digest: str


def link_events(
    run_id: str, head: str | None, drafts: Sequence[TraceDraft]
) -> tuple[list[Link], str | None]:
    """The links of a commit's events after ``head``, and the new head. A run that is not
    chained (``head`` None) stays so: its events get no digests."""
    if head is None:
        return [], None
    links = []
    for d in drafts:
        content = trace_event_digest(run_id, d.event, d.proposal_id, d.details)
        head = trace_link(head, content)
        links.append(Link(content, head))
    return links, head


@dataclass(frozen=True)
class Row:
    """One stored event, as the verifier reads it."""

    sequence: int
    event: str
    proposal_id: str | None
    details: Any
    content_digest: str | None
    chain_digest: str | None
    erased_digest: str | None = None
    scheme: str | None = TRACE_SCHEME


Status = Literal["verified", "broken", "not-chained"]
What = Literal["edited", "missing", "reordered"]


@dataclass(frozen=True)
class Verdict:
    status: Status
    events: int
    head: str | None = None
    sequence: int | None = None  # the first broken link
    what: What | None = None
    reason: str = ""

    @property
    def text(self) -> str:
        if self.status == "verified":
            return f"trace verifies ({self.events} events)"
        if self.status == "not-chained":
            return "trace not chained (" + (self.reason or "a run from before the chain") + ")"
        return f"trace broken at event {self.sequence}: {self.what} ({self.reason})"


def _broken(events: int, sequence: int, what: What, reason: str) -> Verdict:
    return Verdict("broken", events, sequence=sequence, what=what, reason=reason)


def verify(run_id: str, head: str | None, trace_seq: int, rows: Iterable[Row]) -> Verdict:
    """Check a run's stored events (in sequence order) against its head and event count.

    1. ``head`` None: the run was never chained (the caller decides whether it may be).
    2. Walk the events in order from ``GENESIS``: a gap in the numbers is a missing event; an
       event whose content does not give its content digest is edited, unless it gives the
       digest an erase recorded for it and the last erase's seal covers it; an event whose
       chain digest does not link to the one before is reordered when another event of the
       run links to it (it was moved), else edited (its digests were rewritten, or it was
       renumbered over a deleted one).
    3. The last chain digest must be the run's head and the last number its ``trace_seq``: an
       event cut from the end is missing.
    The first broken link found in sequence order is named.
    """
    if head is None:
        return Verdict("not-chained", trace_seq)
    events = list(rows)
    sealed = _sealed(events)
    previous, expected = GENESIS, 1
    for row in events:
        if row.sequence != expected:
            return _broken(len(events), expected, "missing", "the event is not in the trace")
        if row.content_digest is None or row.chain_digest is None or row.scheme is None:
            return _broken(len(events), row.sequence, "edited", "its digests were removed")
        actual = trace_event_digest(run_id, row.event, row.proposal_id, row.details, row.scheme)
        if actual != row.content_digest and not (
            row.erased_digest == actual and row.sequence in sealed
        ):
            reason = "rewritten outside an erase" if row.erased_digest else "content changed"
            return _broken(len(events), row.sequence, "edited", reason)
        if trace_link(previous, row.content_digest, row.scheme) != row.chain_digest:
            return _misplaced(events, row, row.content_digest, row.scheme)
        previous, expected = row.chain_digest, expected + 1
    if expected - 1 < trace_seq:
        return _broken(len(events), expected, "missing", "the run counts more events")
    if previous != head:
        return _broken(len(events), expected - 1, "edited", "the run's head differs")
    return Verdict("verified", len(events), head=head)


def _misplaced(events: Sequence[Row], row: Row, content: str, scheme: str) -> Verdict:
    befores = [GENESIS, *(e.chain_digest for e in events if e.chain_digest is not None)]
    if any(trace_link(b, content, scheme) == row.chain_digest for b in befores):
        return _broken(len(events), row.sequence, "reordered", "it was recorded elsewhere")
    return _broken(len(events), row.sequence, "edited", "its link to the event before changed")


def _sealed(events: Sequence[Row]) -> set[int]:
    """The sequences the last erase's seal covers, when it matches the events it names: only
    the last seal counts (a later erase may rewrite an event an earlier one had rewritten, and
    it seals the whole list again). A rewritten event after the last seal is covered by none."""
    last = next((e for e in reversed(events) if e.event == RUN_VALUES_ERASED and _seal_of(e)), None)
    if last is None:
        return set()
    erased = [
        (e.sequence, e.erased_digest)
        for e in events
        if e.sequence < last.sequence and e.erased_digest is not None
    ]
    if trace_erase_seal(erased, last.scheme or TRACE_SCHEME) != _seal_of(last):
        return set()
    return {s for s, _ in erased}


def _seal_of(row: Row) -> str | None:
    seal = row.details.get("seal") if isinstance(row.details, dict) else None
    return seal if isinstance(seal, str) else None
