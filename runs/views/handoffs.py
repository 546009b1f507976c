"""Console pages of the handoff inbox (views/handoffs). Thin: check rights, parse the form, call
one service or selector, render.

Reviewers (and admins) read, claim and resolve; operators read the inbox and the bundles; every
other signed-in user gets a 404. Who may resolve and which commands fit a handoff are decided in
``runs.domain.handoff`` (the API applies the same rules); the template only shows the result.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_GET, require_POST

from agentconsole import wiring
from agentconsole.kernel.pages import page_error, role_required
from agentconsole.kernel.roles import is_admin, is_operator, is_reviewer
from agentconsole.kernel.status import domain_status
from policy.domain.errors import DomainError
from runs.domain.handoff import RESOLUTION_ACTIONS
from runs.people import handoff_selectors as selectors
from runs.people import handoffs


def reads_handoffs(user: Any) -> bool:
    return is_reviewer(user) or is_operator(user)


class InboxFilter(forms.Form):
    reason = forms.CharField(required=False, max_length=64)


class ResolveForm(forms.Form):
    """Both fields are checked here so a page answers 400 with the service's codes (the
    service checks them again for every other caller)."""

    action = forms.CharField(required=False, max_length=64)
    reason = forms.CharField(required=False, max_length=256)

    def refusal(self) -> tuple[str, str] | None:
        """(code, message) of the first thing wrong, or None."""
        if not self.is_valid():
            if "reason" in self.errors:
                return "VALIDATION_ERROR", "The reason may be at most 256 characters."
            return "HANDOFF_ACTION_UNKNOWN", "No such resolution command."
        if self.cleaned_data["action"] not in RESOLUTION_ACTIONS:
            return "HANDOFF_ACTION_UNKNOWN", "No such resolution command."
        if not self.cleaned_data["reason"].strip():
            return "HANDOFF_REASON_REQUIRED", "Say why: a resolution needs a reason."
        return None


@require_GET
@role_required(reads_handoffs)
def inbox(request: HttpRequest) -> HttpResponse:
    form = InboxFilter(request.GET)
    if not form.is_valid():
        return page_error(request, "VALIDATION_ERROR", "The reason filter is too long.", 400)
    reason = form.cleaned_data["reason"] or None
    found = selectors.handoff_inbox(reason=reason)
    return render(
        request,
        "console/handoffs/inbox.html",
        {"inbox": found, "reason": reason, "may_claim": is_reviewer(request.user)},
    )


def _bundle_page(
    request: HttpRequest,
    handoff_id: int,
    *,
    error: tuple[str, str] | None = None,
    status: int = 200,
    form: ResolveForm | None = None,
) -> HttpResponse:
    view = selectors.handoff_bundle(
        handoff_id=handoff_id,
        user=request.user,
        reviewer=is_reviewer(request.user),
        admin=is_admin(request.user),
        registry=wiring.registry(),
    )
    if view is None:
        return page_error(request, "NOT_FOUND", "No such handoff.", 404)
    context = {
        "view": view,
        "h": view.handoff,
        "b": view.bundle,
        "error": error,
        "posted": form.data if form is not None else {},
    }
    return render(request, "console/handoffs/bundle.html", context, status=status)


@require_GET
@role_required(reads_handoffs)
def bundle(request: HttpRequest, handoff_id: int) -> HttpResponse:
    return _bundle_page(request, handoff_id)


@require_POST
@role_required(is_reviewer)
def claim(request: HttpRequest, handoff_id: int) -> HttpResponse:
    try:
        handoffs.handoff_claim(handoff_id=handoff_id, by=request.user, ctx=wiring.context())
    except DomainError as exc:
        return _failed(request, handoff_id, exc)
    messages.success(request, f"You claimed handoff {handoff_id}: resolve it below.")
    return redirect("handoff-bundle", handoff_id=handoff_id)


@require_POST
@role_required(is_reviewer)
def resolve(request: HttpRequest, handoff_id: int) -> HttpResponse:
    form = ResolveForm(request.POST)
    refusal = form.refusal()
    if refusal is not None:
        return _bundle_page(request, handoff_id, error=refusal, status=400, form=form)
    try:
        handoffs.handoff_resolve(
            handoff_id=handoff_id,
            by=request.user,
            user_is_admin=is_admin(request.user),
            action=form.cleaned_data["action"],
            reason=form.cleaned_data["reason"],
            ctx=wiring.context(),
        )
    except DomainError as exc:
        return _failed(request, handoff_id, exc, form=form)
    messages.success(request, f"Handoff {handoff_id} resolved.")
    return redirect("handoff-bundle", handoff_id=handoff_id)


def _failed(
    request: HttpRequest, handoff_id: int, exc: DomainError, form: ResolveForm | None = None
) -> HttpResponse:
    """A refused command: the bundle again (it shows who holds it now), the code in words."""
    if exc.code == "NOT_FOUND":
        return page_error(request, exc)
    return _bundle_page(
        request, handoff_id, error=(exc.code, exc.message), status=domain_status(exc), form=form
    )


urlpatterns: list[URLPattern] = [
    path("handoffs/", inbox, name="handoff-inbox"),
    path("handoffs/<int:handoff_id>/", bundle, name="handoff-bundle"),
    path("handoffs/<int:handoff_id>/claim/", claim, name="handoff-claim"),
    path("handoffs/<int:handoff_id>/resolve/", resolve, name="handoff-resolve"),
]
