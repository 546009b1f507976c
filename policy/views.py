"""Console pages of policy: the operator's confirmation queue (issue 11 item 3).

Thin: check rights (operators only; anyone else gets a 404), parse the form, call one selector
or service, render. A decision posts the proposal hash the page showed, so a proposal that
changed since the page loaded is refused (409) and nothing is decided; a refused decision is
answered with the queue as it is now, the refusal in words above it.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_GET, require_POST

from agentconsole import wiring
from policy import selectors as policy_selectors
from policy.domain.errors import DomainError, NotFound
from policy.pages import domain_errors, page_error, role_required
from policy.roles import is_operator
from policy.status import domain_status
from runs import selectors as run_selectors
from runs import services as run_services
from runs.domain.lifecycle import MAX_DECISION_REASON
from runs.domain.machine import Status

QUEUE = "console/confirmations/queue.html"


class DecisionForm(forms.Form):
    proposal_hash = forms.RegexField(r"^[0-9a-f]{64}$")
    reason = forms.CharField(required=False, max_length=MAX_DECISION_REASON)


def _queue(request: HttpRequest, *, error: DomainError | None = None) -> HttpResponse:
    queue = policy_selectors.confirmation_queue(
        viewer=request.user,
        registry=wiring.registry(),
        observations=run_selectors.cited_observations,
        recorded=run_selectors.recorded_provenance,
    )
    status = domain_status(error) if error is not None else 200
    return render(
        request,
        QUEUE,
        {"queue": queue, "error": error, "reason_max": MAX_DECISION_REASON},
        status=status,
    )


@require_GET
@role_required(is_operator)
def queue(request: HttpRequest) -> HttpResponse:
    """Pending confirmations, oldest first, each with what is needed to decide it."""
    return _queue(request)


@require_GET
@role_required(is_operator)
@domain_errors
def exact_arguments(request: HttpRequest, confirmation_id: str) -> HttpResponse:
    """The canonical JSON of the arguments (the bytes the hash covers, secrets masked)."""
    text = policy_selectors.confirmation_exact_arguments(confirmation_id=confirmation_id)
    response = HttpResponse(text.encode("utf-8"), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{confirmation_id}-arguments.json"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _decide(request: HttpRequest, confirmation_id: str, *, approved: bool) -> HttpResponse:
    form = DecisionForm(request.POST)
    if not form.is_valid():
        field = next(iter(form.errors))
        return page_error(
            request, "DECISION_INVALID", f"The decision form is not valid ({field}).", 400
        )
    reason = form.cleaned_data["reason"]
    try:
        state = run_services.confirmation_decide(
            confirmation_id=confirmation_id,
            approved=approved,
            shown_hash=form.cleaned_data["proposal_hash"],
            by=request.user,
            reason=reason,
            enqueue=True,
            ctx=wiring.context(),
        )
    except NotFound as exc:
        return page_error(request, exc)
    except DomainError as exc:
        return _queue(request, error=exc)
    goal = state.goal[:120]
    if approved and state.status is Status.WAITING_CONFIRMATION:
        # The first of two approvals (four eyes): recorded; the run waits for another person.
        messages.success(
            request, f"Your approval is recorded; the run “{goal}” waits for a second approver."
        )
        return redirect("confirmation-queue")
    verb = "Approved" if approved else "Declined"
    messages.success(request, f"{verb}: the proposal of the run “{goal}”.")
    return redirect("confirmation-queue")


@require_POST
@role_required(is_operator)
def approve(request: HttpRequest, confirmation_id: str) -> HttpResponse:
    return _decide(request, confirmation_id, approved=True)


@require_POST
@role_required(is_operator)
def decline(request: HttpRequest, confirmation_id: str) -> HttpResponse:
    return _decide(request, confirmation_id, approved=False)


urlpatterns: list[URLPattern] = [
    path("confirmations/", queue, name="confirmation-queue"),
    path(
        "confirmations/<str:confirmation_id>/exact.json",
        exact_arguments,
        name="confirmation-exact",
    ),
    path("confirmations/<str:confirmation_id>/approve/", approve, name="confirmation-approve"),
    path("confirmations/<str:confirmation_id>/decline/", decline, name="confirmation-decline"),
]
