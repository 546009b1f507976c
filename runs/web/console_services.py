"""Writes from the console's runs pages (runs/views/runs.py): cancel, with the page's refusals in
the API's words. The cancel itself is ``runs.services.run_cancel``."""

from __future__ import annotations

from typing import Any

from policy.domain.errors import DomainError
from runs import selectors, services
from runs.context import RunsContext
from runs.domain.machine import TERMINAL
from runs.domain.state import RunState


def run_cancel_by(*, user: Any, run_id: str, reason: str, ctx: RunsContext) -> RunState:
    """Cancel a run from its page. A run the user may not see is NOT_FOUND; one they see but do
    not own (a reviewer) PERMISSION_DENIED unless they are an operator. A finished run is
    RUN_ALREADY_FINISHED here, where the API's cancel answers it quietly with the run's state."""
    run = selectors.access_run(user=user, run_id=run_id)
    if run.status in TERMINAL:
        raise DomainError(
            f"This run has already finished ({run.status}); there is nothing to cancel.",
            code="RUN_ALREADY_FINISHED",
        )
    if not selectors.may_act_on_run(user=user, run=run):
        raise DomainError(
            "Only the run's owner or an operator cancels it.", code="PERMISSION_DENIED"
        )
    return services.run_cancel(run_id=run.pk, by=user, reason=reason, enqueue=True, ctx=ctx)
