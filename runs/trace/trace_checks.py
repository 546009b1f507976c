"""Reads that check a run's trace against its hash chain (issue 23 item 5,
``runs.domain.trace_chain``): ``manage.py verify_trace`` and the run page use them.

Checking a run reads all its events once (O(events), one query, streamed in chunks): cheap for
one page (a 2,000-event run checks in a few tens of milliseconds) and nothing a step ever does.
The verdict is not cached: a cached "verifies" would hide an edit made after it was computed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from runs import models as m
from runs.domain.trace_chain import Row, Verdict, verify

ROW_COLUMNS = (
    "sequence", "event", "proposal_id", "details", "content_digest", "chain_digest",
    "erased_digest", "hash_scheme",
)  # fmt: skip


def _rows(run_id: str) -> Iterator[Row]:
    rows = m.TraceEvent.objects.filter(run_id=run_id).order_by("sequence")
    for values in rows.values_list(*ROW_COLUMNS).iterator(chunk_size=2000):
        yield Row(*values)


def trace_verify(*, run: m.Run) -> Verdict:
    """Whether ``run``'s trace verifies, or where its chain first breaks; "not-chained" for a
    run from before the chain (``Run.trace_head`` NULL: migration 0014 left its events without
    digests, and such a run stays unchained to its end rather than starting a chain midway)."""
    return verify(run.pk, run.trace_head, run.trace_seq, _rows(run.pk))


def traces_verify(*, run_ids: Sequence[str] = ()) -> Iterator[tuple[str, Verdict]]:
    """Each named run (every run, oldest first, when none is named) with its verdict; a run
    that does not exist is an unknown id (``LookupError``), raised before any is checked."""
    runs: Any = m.Run.objects.only("id", "trace_head", "trace_seq")
    if run_ids:
        found = {r.pk: r for r in runs.filter(pk__in=list(run_ids))}
        unknown = [i for i in run_ids if i not in found]
        if unknown:
            raise LookupError(", ".join(unknown))
        ordered = [found[i] for i in dict.fromkeys(run_ids)]
    else:
        ordered = runs.order_by("created_at", "id").iterator(chunk_size=500)
    for run in ordered:
        yield run.pk, trace_verify(run=run)
