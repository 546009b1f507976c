"""Console pages of policy: the operator's confirmation queue (issue 11 item 3).

Thin: check rights (operators only; anyone else gets a 404), parse the form, call one selector
or service, render. A decision posts the proposal hash the page showed, so a proposal that
changed since the page loaded is refused (409) and nothing is decided; a refused decision is
answered with the queue as it is now, the refusal in words above it.

The queue is a compact list with a detail pane (issue 24 item 2): GET filters and paging
(policy.queue_list), the selected item's card (``?item=``), the identical proposals waiting in
other runs and the last approved call of the tool for the subject (policy.queue_similar). The
list's live updates arrive on /ws/console/ (runs.consumers); the page fetches the rows a frame
announces (``rows/``) and, on a wide screen, the detail of a row (``<id>/detail/``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agentconsole import wiring
from agentconsole.kernel.pages import domain_errors, page_error, role_required
from agentconsole.kernel.roles import is_operator
from agentconsole.kernel.status import domain_status
from policy import queue_list, queue_similar
from policy import selectors as policy_selectors
from policy.domain import strict_json
from policy.domain.confirmation.edits import EditInvalid
from policy.domain.errors import DomainError, NotFound
from policy.domain.registry import ToolRegistry
from policy.domain.strict_json import JsonRefused
from runs import selectors as run_selectors
from runs import services as run_services
from runs.domain.lifecycle import MAX_DECISION_REASON
from runs.domain.machine import Status
from runs.domain.step.edits import MAX_NOTE
from runs.people import answers as run_answers
from runs.people import batch as run_batch

QUEUE = "console/confirmations/queue.html"


class DecisionForm(forms.Form):
    proposal_hash = forms.RegexField(r"^[0-9a-f]{64}$")
    reason = forms.CharField(required=False, max_length=MAX_DECISION_REASON)


def _detail(
    request: HttpRequest, confirmation_id: str, back: str, registry: ToolRegistry
) -> dict[str, Any]:
    """The detail pane of one item: its card, the identical proposals, the approved before."""
    card = policy_selectors.confirmation_queue_item(
        viewer=request.user,
        registry=registry,
        observations=run_selectors.cited_observations,
        confirmation_id=confirmation_id,
        recorded=run_selectors.recorded_provenance,
    )
    if card is None:
        return {"cards": [], "gone": confirmation_id, "back": back}
    return {
        "cards": [card],
        "identical": queue_similar.identical_waiting(viewer=request.user, item=card),
        "before": queue_similar.approved_before(item=card),
        "back": back,
        "reason_max": MAX_DECISION_REASON,
        "note_max": MAX_NOTE,
    }


def _queue(
    request: HttpRequest,
    *,
    error: DomainError | None = None,
    refused: str = "",
    answer: Answer | None = None,
) -> HttpResponse:
    """The page; after a refused decision (``refused``: its confirmation) the same page with
    the refusal above it and, when it still waits on this page, that item in the detail. A
    refused edit or response (``answer``) shows beside its item's form, what was typed kept."""
    refused = answer.confirmation_id if answer is not None else refused
    try:
        filters = queue_list.queue_filters(request.GET)
    except DomainError as exc:
        return page_error(request, exc)
    registry = wiring.registry()
    page = queue_list.queue_page(
        viewer=request.user, registry=registry, filters=filters, now=timezone.now()
    )
    chosen = str(request.GET.get("item") or "")[:128]
    listed = [r.confirmation_id for r in page.rows]
    first = refused if refused in listed else (listed[0] if listed else "")
    selected = chosen or first
    back = filters.query(page=filters.page)
    if answer is not None and answer.confirmation_id != selected:
        answer = None  # the item is gone (decided meanwhile): the refusal goes above the queue
    context = {
        "page": page,
        "filters": filters,
        "back": back,
        "base_query": filters.query(page=1),
        "queue_url": reverse("confirmation-queue"),
        "selected": selected,
        # A refused decision or answer comes back in its own view on a phone too.
        "chosen": bool(chosen) or (bool(refused) and selected == refused),
        "error": error if answer is None else None,
        "answer": answer,
        "rendered_at": timezone.now().isoformat(),
        "side_effects": queue_list.SIDE_EFFECTS,
        "ages": list(queue_list.AGES),
        "reason_max": MAX_DECISION_REASON,
        **(_detail(request, selected, back, registry) if selected else {}),
    }
    status = domain_status(error) if error is not None else 200
    return render(request, QUEUE, context, status=status)


@require_GET
@role_required(is_operator)
def queue(request: HttpRequest) -> HttpResponse:
    """Pending confirmations as a compact list (filters, search, pages, order) and the
    selected one's card beside it."""
    return _queue(request)


@require_GET
@role_required(is_operator)
@domain_errors
def queue_rows(request: HttpRequest) -> HttpResponse:
    """The list rows of ``?id=…`` still waiting under the page's filters (the live list)."""
    filters = queue_list.queue_filters(request.GET)
    rows = queue_list.queue_rows(
        viewer=request.user,
        registry=wiring.registry(),
        filters=filters,
        ids=request.GET.getlist("id"),
        now=timezone.now(),
    )
    context = {
        "rows": rows,
        "back": filters.query(page=filters.page),
        "selected": "",
        "queue_url": reverse("confirmation-queue"),
    }
    return render(request, "console/confirmations/_rows.html", context)


@require_GET
@role_required(is_operator)
@domain_errors
def queue_detail(request: HttpRequest, confirmation_id: str) -> HttpResponse:
    """The detail pane of one item, for the list to show beside it without a reload."""
    filters = queue_list.queue_filters(request.GET)
    back = filters.query(page=filters.page)
    context = _detail(request, confirmation_id, back, wiring.registry())
    return render(request, "console/confirmations/_detail.html", context)


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
        return _queue(request, error=exc, refused=confirmation_id)
    goal = state.goal[:120]
    if approved and state.status is Status.WAITING_CONFIRMATION:
        # The first of two approvals (four eyes): recorded; the run waits for another person.
        messages.success(
            request, f"Your approval is recorded; the run “{goal}” waits for a second approver."
        )
        return _back(request)
    verb = "Approved" if approved else "Declined"
    messages.success(request, f"{verb}: the proposal of the run “{goal}”.")
    return _back(request)


def _back(request: HttpRequest) -> HttpResponse:
    """To the queue with the filters the person had (``back``, re-parsed: never a URL)."""
    try:
        filters = queue_list.queue_filters(QueryDict(str(request.POST.get("back") or "")[:2000]))
    except DomainError:
        return redirect("confirmation-queue")
    query = filters.query(page=filters.page)
    return redirect(reverse("confirmation-queue") + (f"?{query}" if query else ""))


class BatchForm(forms.Form):
    proposal_hash = forms.RegexField(r"^[0-9a-f]{64}$")
    decision = forms.ChoiceField(choices=[("approve", "approve"), ("decline", "decline")])
    reason = forms.CharField(required=False, max_length=MAX_DECISION_REASON)


@require_POST
@role_required(is_operator)
def batch(request: HttpRequest) -> HttpResponse:
    """Identical proposals decided together: each one through the single decision, the
    outcome said per run (runs.people.batch)."""
    form = BatchForm(request.POST)
    if not form.is_valid():
        field = next(iter(form.errors))
        return page_error(
            request, "DECISION_INVALID", f"The batch form is not valid ({field}).", 400
        )
    approved = form.cleaned_data["decision"] == "approve"
    try:
        outcomes = run_batch.confirmations_decide_batch(
            confirmation_ids=request.POST.getlist("ids"),
            approved=approved,
            shown_hash=form.cleaned_data["proposal_hash"],
            by=request.user,
            reason=form.cleaned_data["reason"],
            enqueue=True,
            ctx=wiring.context(),
        )
    except DomainError as exc:
        return _queue(request, error=exc)
    done = [o for o in outcomes if not o.refused]
    verb = "Approved" if approved else "Declined"
    if done:
        messages.success(request, f"{verb} {len(done)} of {len(outcomes)} identical proposals.")
    for o in outcomes:
        if o.refused:
            messages.error(request, f"Run {o.run_id or '?'}: not decided ({o.code}): {o.message}")
    return _back(request)


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
    return _back(request)


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
    return _back(request)


urlpatterns: list[URLPattern] = [
    path("confirmations/", queue, name="confirmation-queue"),
    path("confirmations/rows/", queue_rows, name="confirmation-rows"),
    path("confirmations/batch/", batch, name="confirmation-batch"),
    path("confirmations/<str:confirmation_id>/detail/", queue_detail, name="confirmation-detail"),
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
