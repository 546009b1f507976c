"""What an erase rewrites, as each owner declares it (issue 21 item 3, issue 25 item 4): the
``Place`` every app's list is made of, and policy's own places.

An app names the columns of its own models that can hold a copy of a subject's value; the
runs side of the erase (``runs.privacy.erasure``) joins every app's list into
``runs.privacy.erasure_places.ERASED`` and rewrites them, without importing another app's models.
``Place`` lives here, in the base app, so that memory and runs can both build on it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.db import models

from policy.models import Confirmation, ConfirmationApproval, Grant


@dataclass(frozen=True)
class Place:
    """``columns`` of ``model`` can hold a copy of a subject's value.

    ``run`` is the lookup from a row to the id of the run it belongs to; a place of the subject's
    own memory (``run`` None) is found by its ``subject`` column instead."""

    model: type[models.Model]
    columns: tuple[str, ...]
    run: str | None = "run_id"

    def rows(self, *, subject: str, run_ids: Collection[str]) -> Any:
        # A plain queryset: the trace's own manager refuses every update, and erasure is the one
        # sanctioned rewrite of its details (never of an event's identity).
        rows: models.QuerySet[Any] = models.QuerySet(model=self.model)
        if self.run is None:
            return rows.filter(subject=subject)
        return rows.filter(**{f"{self.run}__in": list(run_ids)})


ERASED: tuple[Place, ...] = (
    # What people typed: an operator's decline, each approver's reason.
    # edit_diff: what a person's edit changed, values as they were shown and typed.
    Place(Confirmation, ("proposal", "decision_reason", "edit_diff")),
    Place(ConfirmationApproval, ("reason",), run="confirmation__run_id"),
    Place(Grant, ("constraints",)),
)
