"""Writes from the console's runs pages (runs/views/runs.py): cancel, with the page's refusals in
the API's words. The cancel itself is ``runs.services.run_cancel``."""

from __future__ import annotations

from typing import Any

from policy.domain.errors import DomainError
from runs import console_selectors, selectors, services
from runs.context import RunsContext
from runs.domain.state import RunState


class Refused(DomainError):
    """A page's refusal with its stable code and the HTTP status the API gives that code."""

    def __init__(self, message: str, *, code: str, http_status: int) -> None:
        super().__init__(message, code=code)
        self.http_status = http_status


def run_cancel_by(*, user: Any, run_id: str, reason: str, ctx: RunsContext) -> RunState:
    """Cancel a run from its page. A run the user may not see is NOT_FOUND; one they see but do
    not own (a reviewer) PERMISSION_DENIED unless they are an operator; a finished run
    RUN_ALREADY_FINISHED (the service itself would quietly return its state)."""
    run = selectors.access_run(user=user, run_id=run_id)
    if run.status in console_selectors.FINISHED:
        raise Refused(
            f"This run has already finished ({run.status}); there is nothing to cancel.",
            code="RUN_ALREADY_FINISHED",
            http_status=409,
        )
    if not console_selectors.may_cancel(user=user, run=run):
        raise Refused(
            "Only the run's owner or an operator cancels it.",
            code="PERMISSION_DENIED",
            http_status=403,
        )
    return services.run_cancel(run_id=run.pk, by=user, reason=reason, enqueue=True, ctx=ctx)
