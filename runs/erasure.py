"""Erase values from a subject's run records (issue 9 item 11): the runs side of a memory erase.

A user who erases their long-term memory erases its values everywhere the runtime copied them:
the goal, the planner configuration (a fixture planner's scripted outputs), the pending proposal
and the answer of the run, observations, ledger arguments and outcomes, confirmation proposals,
grant constraints, handoff bundles, trace event details and working memory. Only runs whose
subject is the erasing subject are touched.

Each copy becomes a tag (``policy.domain.redaction.ValueEraser``); the stored hashes stay as they
were (proposal hash, arguments hash, content hash, idempotency token), so the audit still shows
that a record existed and what its hash was. Re-hashing tombstoned content does not give the
stored hash back: that is by design, the content it was computed from no longer exists.

Out of scope: files a tool wrote under the run-output root (artifact rows keep their path and
hash; the files are the deployment's storage), and a tool call already running when the erase
commits (its arguments left the database before the erase).
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from typing import Any

from django.db import models, transaction

from memory.models import WorkingMemoryItem
from policy.domain.redaction import ValueEraser
from policy.models import Confirmation, Grant
from runs import models as m
from runs.domain import trace as ev
from runs.domain.commits import Commit
from runs.domain.errors import VersionConflict
from runs.store import OrmRunStore

# The columns that hold content copied from a run's inputs and outputs. Identity, status, code
# and hash columns are never rewritten: they hold no user text, and the audit needs them intact.
# ``tests/memory/test_erase_everywhere.py`` searches every table, so a content column added later
# and missing here fails that test.
_CONTENT: tuple[tuple[type[models.Model], tuple[str, ...]], ...] = (
    (m.Observation, ("content",)),
    (m.LedgerEntry, ("arguments", "outcome", "verification", "resource")),
    (m.Handoff, ("bundle", "resolution")),
    (Confirmation, ("proposal",)),
    (Grant, ("constraints",)),
    (WorkingMemoryItem, ("content",)),
)
_MAX_RETRIES = 20


def run_values_erase(*, subject: str, values: Collection[str], by: str, store: OrmRunStore) -> int:
    """Replace ``values`` in every record of ``subject``'s runs; return how many were replaced.

    Needs the caller's transaction (the memory erase): all or nothing with it.

    1. Lock the subject's runs (PostgreSQL: a step committing concurrently waits for the erase).
    2. Rewrite the content columns of the rows that belong to those runs.
    3. Each run that held a value gets a ``run.values-erased`` trace event through the store,
       with its pending proposal and answer erased: its version moves on, so a step a worker
       decided on the run as it was before the erase fails its compare-and-set and is decided
       again from the erased state, instead of writing the old values back.
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
    for model, fields in _CONTENT:
        touched |= _erase_rows(model.objects.filter(run_id__in=run_ids), fields, eraser)
    # The trace is append-only for the application; erasure is the one sanctioned rewrite, of
    # the details only (never event, sequence or proposal id). A plain queryset on purpose: the
    # model's own manager refuses every update.
    events = models.QuerySet(model=m.TraceEvent).filter(run_id__in=run_ids)
    touched |= _erase_rows(events, ("details",), eraser)
    for run_id in run_ids:
        _erase_run(run_id, eraser, store, by=by, touched=run_id in touched)
    return eraser.replaced


def _erase_run(
    run_id: str, eraser: ValueEraser, store: OrmRunStore, *, by: str, touched: bool
) -> None:
    before = eraser.replaced
    for _ in range(_MAX_RETRIES):
        try:
            with transaction.atomic():
                state = store.load(run_id)
                row = m.Run.objects.values("goal", "planner").get(pk=run_id)
                pending, answer = state.pending_proposal, state.answer
                state.pending_proposal = eraser.erase(pending)
                state.answer = eraser.erase(answer)
                goal, planner = eraser.erase(row["goal"]), eraser.erase(row["planner"])
                if eraser.replaced == before and not touched:
                    return  # nothing of the erased values in this run: leave it alone
                commit = Commit(expected_version=state.version, state=state)
                commit.events.append(ev.TraceDraft(ev.RUN_VALUES_ERASED, None, {"by": by[:150]}))
                commit.state.version += 1
                store.apply(commit)
                m.Run.objects.filter(pk=run_id).update(goal=goal, planner=planner)
                return
        except VersionConflict:
            # SQLite: a step committed between the read and the write. Erase the new state.
            eraser.replaced = before
    raise VersionConflict("run too busy to erase", run_id=run_id)


def _erase_rows(rows: Any, fields: tuple[str, ...], eraser: ValueEraser) -> set[str]:
    touched = set()
    for row in rows.values("pk", "run_id", *fields).iterator():
        changed = {}
        for name in fields:
            new = eraser.erase(row[name])
            if new is not row[name]:
                changed[name] = new
        if changed:
            models.QuerySet(model=rows.model).filter(pk=row["pk"]).update(**changed)
            touched.add(row["run_id"])
    return touched
