"""Console pages of policy: the operator's confirmation queue (issue 11 item 3).

Thin: check rights (operators only; anyone else gets a 404), parse the form, call one selector
or service, render. A decision posts the proposal hash the page showed, so a proposal that
changed since the page loaded is refused (409) and nothing is decided; a refused decision is
answered with the queue as it is now, the refusal in words above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_GET, require_POST

from agentconsole import wiring
from policy import selectors as policy_selectors
from policy.domain import strict_json
from policy.domain.edits import EditInvalid
from policy.domain.errors import DomainError, NotFound
from policy.domain.strict_json import JsonRefused
from policy.pages import domain_errors, page_error, role_required
from policy.roles import is_operator
from policy.status import domain_status
from runs import answers as run_answers
from runs import selectors as run_selectors
from runs import services as run_services
from runs.domain.edits import MAX_NOTE
from runs.domain.lifecycle import MAX_DECISION_REASON
from runs.domain.machine import Status

QUEUE = "console/confirmations/queue.html"


class DecisionForm(forms.Form):
    proposal_hash = forms.RegexField(r"^[0-9a-f]{64}$")
    reason = forms.CharField(required=False, max_length=MAX_DECISION_REASON)


def _queue(
    request: HttpRequest, *, error: DomainError | None = None, answer: Answer | None = None
) -> HttpResponse:
    """The queue; with ``error``, the refusal in words above it, or, for an edit or a response
    whose item is still listed, beside that item's form with what the person typed kept."""
    queue = policy_selectors.confirmation_queue(
        viewer=request.user,
        registry=wiring.registry(),
        observations=run_selectors.cited_observations,
        recorded=run_selectors.recorded_provenance,
    )
    status = domain_status(error) if error is not None else 200
    if answer is not None and not any(
        i.confirmation_id == answer.confirmation_id for i in queue.items
    ):
        answer = None  # the item is gone (decided meanwhile): the refusal goes above the queue
    return render(
        request,
        QUEUE,
        {
            "queue": queue,
            "error": error if answer is None else None,
            "answer": answer,
            "reason_max": MAX_DECISION_REASON,
            "note_max": MAX_NOTE,
        },
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


@dataclass(frozen=True)
class Answer:
    """An edit or a response that was refused, for the queue to show again beside its item:
    which form (``kind``: edit | respond), what the person typed, and why it was refused."""

    confirmation_id: str
    kind: str
    text: str
    reason: str
    error: DomainError


class EditForm(forms.Form):
    proposal_hash = forms.RegexField(r"^[0-9a-f]{64}$")
    arguments = forms.CharField(strip=False)
    reason = forms.CharField(required=False, max_length=MAX_DECISION_REASON)


class RespondForm(forms.Form):
    proposal_hash = forms.RegexField(r"^[0-9a-f]{64}$")
    # Required and bounded by the service (NOTE_REQUIRED, NOTE_TOO_LONG), as over the API.
    note = forms.CharField(required=False, strip=False)


@require_POST
@role_required(is_operator)
def edit(request: HttpRequest, confirmation_id: str) -> HttpResponse:
    """Edit the waiting proposal's arguments (JSON) and approve the edited call; a refusal
    shows the queue again with the typed text kept and the reason beside it."""
    form = EditForm(request.POST)
    if not form.is_valid() and set(form.errors) - {"arguments"}:
        return page_error(request, "DECISION_INVALID", "The edit form is not valid.", 400)
    text = request.POST.get("arguments", "")
    reason = form.cleaned_data.get("reason", "")
    try:
        edited = run_answers.confirmation_edit(
            confirmation_id=confirmation_id,
            shown_hash=form.cleaned_data["proposal_hash"],
            arguments=_typed(text),
            by=request.user,
            reason=reason,
            enqueue=True,
            ctx=wiring.context(),
        )
    except NotFound as exc:
        return page_error(request, exc)
    except DomainError as exc:
        return _queue(request, error=exc, answer=Answer(confirmation_id, "edit", text, reason, exc))
    goal = edited.state.goal[:120]
    if edited.state.status is Status.WAITING_CONFIRMATION:
        said = (
            f"Your edit is recorded as one approval; the run “{goal}” waits for a second "
            "approver of the edited proposal."
        )
    elif edited.confirmation_id is None:
        said = f"Edited: the run “{goal}” goes on with your arguments (they need no confirmation)."
    else:
        said = f"Edited and approved: the run “{goal}” goes on with your arguments."
    messages.success(request, said)
    return redirect("confirmation-queue")


def _typed(text: str) -> Any:
    """The arguments a person typed, read as the API reads JSON (strict_json): a text that is
    no JSON is refused with EDIT_ARGUMENTS_INVALID and the parser's words."""
    try:
        return strict_json.loads(text)
    except JsonRefused as exc:
        message = f"The arguments are not valid JSON: {exc.message}"
        raise EditInvalid(message, reason=exc.code) from None


@require_POST
@role_required(is_operator)
def respond(request: HttpRequest, confirmation_id: str) -> HttpResponse:
    """Send the planner a note instead of deciding: the run plans a new step with it."""
    form = RespondForm(request.POST)
    if not form.is_valid():
        return page_error(request, "DECISION_INVALID", "The response form is not valid.", 400)
    note = form.cleaned_data["note"]
    try:
        state = run_answers.confirmation_respond(
            confirmation_id=confirmation_id,
            shown_hash=form.cleaned_data["proposal_hash"],
            note=note,
            by=request.user,
            enqueue=True,
            ctx=wiring.context(),
        )
    except NotFound as exc:
        return page_error(request, exc)
    except DomainError as exc:
        return _queue(request, error=exc, answer=Answer(confirmation_id, "respond", note, "", exc))
    goal = state.goal[:120]
    messages.success(request, f"Sent to the planner: the run “{goal}” plans its next step with it.")
    return redirect("confirmation-queue")


urlpatterns: list[URLPattern] = [
    path("confirmations/", queue, name="confirmation-queue"),
    path(
        "confirmations/<str:confirmation_id>/exact.json",
        exact_arguments,
        name="confirmation-exact",
    ),
    path("confirmations/<str:confirmation_id>/approve/", approve, name="confirmation-approve"),
    path("confirmations/<str:confirmation_id>/decline/", decline, name="confirmation-decline"),
    path("confirmations/<str:confirmation_id>/edit/", edit, name="confirmation-edit"),
    path("confirmations/<str:confirmation_id>/respond/", respond, name="confirmation-respond"),
]
