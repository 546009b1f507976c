"""Erase values from a subject's records (issue 9 item 11, issue 21 item 3): the runs side of a
memory erase.

A user who erases their long-term memory erases its values everywhere the runtime copied them: every
column ``runs.privacy.erasure_places.ERASED`` names, in the subject's runs (the goal, the planner
configuration, the pending proposal and the answer, observations, the ledger, artifacts' paths,
confirmations, grant constraints, handoffs, trace event details, working memory) and what people
typed about them (a decline, an approval, a revocation's reason). Only the erasing subject's rows
are touched.

Each copy becomes a tag (``policy.domain.secrets.redaction.ValueEraser``); the stored hashes stay as
they were (proposal hash, arguments hash, content hash, idempotency token), so the audit still shows
that a record existed and what its hash was. Re-hashing tombstoned content does not give the stored
hash back: that is by design, the content it was computed from no longer exists. The trace's hash
chain is built on such kept digests: an erased event also gets the digest of its rewritten details
(``erased_digest``), and the erase's own ``run.values-erased`` event seals the list of them, so the
chain still verifies (``runs.domain.trace_chain``).

Out of scope: files a tool wrote under the run-output root (artifact rows keep their hash; the
files are the deployment's storage), ids a planner chose (``erasure_places.NOT_REWRITTEN``),
and a tool call already running when the erase commits (its arguments left the database
before the erase).
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from typing import Any

from django.db import models, transaction

from policy.domain.canonical import trace_erase_seal, trace_event_digest
from policy.domain.secrets.redaction import ValueEraser
from runs import models as m
from runs.domain import trace as ev
from runs.domain.errors import VersionConflict
from runs.domain.step.commits import Commit
from runs.orm.store import OrmRunStore
from runs.privacy import erasure_places as places

_MAX_RETRIES = 20


def run_values_erase(*, subject: str, values: Collection[str], by: str, store: OrmRunStore) -> int:
    """Replace ``values`` in every place ``erasure_places.ERASED`` names; return how many were
    replaced.

    Needs the caller's transaction (the memory erase): all or nothing with it.

    1. Lock the subject's runs (PostgreSQL: a step committing concurrently waits for the erase).
    2. Rewrite the columns of every place but the run row, in the subject's rows.
    3. Each run that held a value gets a ``run.values-erased`` trace event through the store,
       and its own columns erased: its version moves on, so a step a worker decided on the run
       as it was before the erase fails its compare-and-set and is decided again from the
       erased state, instead of writing the old values back.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("run_values_erase must run inside the erasing transaction")
    if not values:
        return 0
    # A fresh key per erasure, kept nowhere: the tags cannot be tested against guesses later.
    eraser = ValueEraser(values, key=secrets.token_bytes(32))
    run_ids = list(
        m.Run.objects.select_for_update().filter(subject=subject).values_list("pk", flat=True)
    )
    touched: set[str] = set()
    run_columns: tuple[str, ...] = ()
    for place in places.ERASED:
        if place.model is m.Run:
            run_columns += place.columns
            continue
        rows = place.rows(subject=subject, run_ids=run_ids)
        touched |= _erase_rows(rows, place, eraser)
    for run_id in run_ids:
        _erase_run(run_id, run_columns, eraser, store, by=by, touched=run_id in touched)
    return eraser.replaced


def _erase_run(
    run_id: str,
    columns: tuple[str, ...],
    eraser: ValueEraser,
    store: OrmRunStore,
    *,
    by: str,
    touched: bool,
) -> None:
    before = eraser.replaced
    for _ in range(_MAX_RETRIES):
        try:
            with transaction.atomic():
                state = store.load(run_id)
                # Read after the state: a commit landing in between fails the apply below.
                row = m.Run.objects.values(*columns).get(pk=run_id) if columns else {}
                changed = _erased(m.Run, row, eraser)
                if not changed and not touched:
                    return  # nothing of the erased values in this run: leave it alone
                commit = Commit(expected_version=state.version, state=state)
                details = {"by": by[:150], **_seal(run_id, chained=state.trace_head is not None)}
                commit.events.append(ev.TraceDraft(ev.RUN_VALUES_ERASED, None, details))
                commit.state.version += 1
                store.apply(commit)
                # In the same transaction, under the row lock the apply took: the state it wrote
                # (pending proposal, answer) is overwritten with its erased columns.
                if changed:
                    m.Run.objects.filter(pk=run_id).update(**changed)
                return
        except VersionConflict:
            # SQLite: a step committed between the read and the write. Erase the new state.
            eraser.replaced = before
    raise VersionConflict("run too busy to erase", run_id=run_id)


def _erased(model: type[models.Model], row: dict[str, Any], eraser: ValueEraser) -> dict[str, Any]:
    """The columns of ``row`` that held a value, erased. A tag is longer than most values: a
    text column with a length limit keeps its first ``max_length`` characters, or the update
    would fail on PostgreSQL (every value is tagged before the cut, so none is left in it)."""
    changed = {}
    for name, old in row.items():
        new = eraser.erase(old)
        if new is old:
            continue
        limit = getattr(model._meta.get_field(name), "max_length", None)
        if isinstance(new, str) and limit is not None:
            new = new[:limit]
        changed[name] = new
    return changed


def _seal(run_id: str, *, chained: bool) -> dict[str, Any]:
    """The erase event's seal over every event of the run an erase rewrote (this one and any
    before it: an event rewritten twice is sealed with its latest digest), so the chain still
    verifies and an edit dressed as an erase does not (``runs.domain.trace_chain``)."""
    if not chained:
        return {}
    erased = m.TraceEvent.objects.filter(run_id=run_id, erased_digest__isnull=False)
    pairs = list(erased.order_by("sequence").values_list("sequence", "erased_digest"))
    return {"erased_events": len(pairs), "seal": trace_erase_seal(pairs)}


# A trace event's erased details get the digest of what they now say, beside the content digest
# its chain was built on (which stays).
_TRACE_COLUMNS = ("event", "proposal_id", "hash_scheme")


def _erased_digest(row: dict[str, Any], changed: dict[str, Any]) -> dict[str, Any]:
    if row["hash_scheme"] is None:
        return {}  # an event of a run from before the chain
    digest = trace_event_digest(
        row["run_id"], row["event"], row["proposal_id"], changed["details"], row["hash_scheme"]
    )
    return {"erased_digest": digest}


def _erase_rows(rows: Any, place: places.Place, eraser: ValueEraser) -> set[str]:
    """Erase ``place``'s columns in ``rows``; the ids of the runs whose rows changed."""
    touched = set()
    run = place.run or "pk"
    trace = place.model is m.TraceEvent
    extra = _TRACE_COLUMNS if trace else ()
    for row in rows.values("pk", run, *place.columns, *extra).iterator():
        changed = _erased(place.model, {c: row[c] for c in place.columns}, eraser)
        if changed and trace:
            changed.update(_erased_digest(row, changed))
        if changed:
            models.QuerySet(model=place.model).filter(pk=row["pk"]).update(**changed)
            if place.run is not None:
                touched.add(row[run])
    return touched
