"""Console pages of memory (issue 11 items 5 and 6). Thin: check rights, parse a form, call one
service or selector, render.

- ``/preferences/`` (everyone, their own only): current values, history, edit through a
  confirmation of the exact value, version conflicts, revoke, export, erase.
- ``/memory/`` (operators and admins; 404 to others): search, the audit trail of a key, revoke
  with a reason.

The subject of every ``/preferences/`` URL is the signed-in user: no URL names another subject,
and a change id of another subject is a 404.
"""

from __future__ import annotations

import re

from django.contrib import messages
from django.core.serializers.json import DjangoJSONEncoder
from django.forms import Form
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agentconsole import wiring
from agentconsole.kernel.pages import (
    canonical_json,
    domain_errors,
    page_error,
    role_required,
    signed_in,
)
from agentconsole.kernel.roles import is_operator
from memory import console_services, selectors, services
from memory.forms import (
    AdminRevokeForm,
    ConfirmForm,
    EraseForm,
    ProposeForm,
    RevokeForm,
    SearchForm,
    form_errors,
)

PREFERENCES = "/preferences/"


def _subject(request: HttpRequest) -> str:
    return request.user.get_username()


def _bad_form(request: HttpRequest, form: Form) -> HttpResponse:
    return page_error(request, "VALIDATION_ERROR", form_errors(form), 400)


@role_required(signed_in)
@require_GET
def preferences_page(request: HttpRequest) -> HttpResponse:
    keys = selectors.preferences_overview(subject=_subject(request))
    return render(request, "console/memory/preferences.html", {"keys": keys})


# Refusals of the value itself: the form comes back with the value kept (issue 21 item 14).
_VALUE_CODES = ("MEMORY_VALUE_INVALID", "MEMORY_VALUE_TOO_LONG")


@role_required(signed_in)
@require_POST
@domain_errors
def preference_propose(request: HttpRequest) -> HttpResponse:
    """Step 1 of an edit: nothing is written; the user is shown the exact change to confirm.
    A value the key does not take brings the page back, the value in its field and the key's
    rule in words beside it; anything else (an unknown key, a malformed form) is the error
    page."""
    form = ProposeForm(request.POST)
    if not form.is_valid():
        if set(form.errors) == {"value"}:  # the key and the version parsed: show the form
            return _edit_again(request, form, "VALIDATION_ERROR", form_errors(form))
        return _bad_form(request, form)
    try:
        change = services.preference_propose_edit(
            subject=_subject(request),
            key=form.cleaned_data["key"],
            value=form.cleaned_data["value"],
            expected_version=form.cleaned_data["expected_version"],
            by=request.user,
        )
    except services.MemoryError as exc:
        if exc.code not in _VALUE_CODES:
            raise
        return _edit_again(request, form, exc.code, exc.message)
    return redirect(f"{PREFERENCES}changes/{change.pk}/")


def _edit_again(request: HttpRequest, form: ProposeForm, code: str, message: str) -> HttpResponse:
    """The preferences page with the refused edit in its form: the typed value, the version
    the user read and the reason, in words (the key's own, when it has a policy)."""
    keys = selectors.preferences_overview(subject=_subject(request))
    key = form.data.get("key", "")
    item = next((k for k in keys if k.key == key and k.policy is not None), None)
    if item is None:
        return page_error(request, code, message, 400)
    typed = form.data.get("value", "")
    if code == "VALIDATION_ERROR" and item.policy is not None:
        # The form refused it before the key's policy saw it (empty, or over the form's
        # bound): the key's own words still say what to type.
        code, message = item.policy.violation(typed) or (code, message)
    edit = {
        "key": key,
        "value": typed,
        "expected_version": form.data.get("expected_version", ""),
        "code": code,
        "message": message,
    }
    context = {"keys": keys, "edit": edit}
    return render(request, "console/memory/preferences.html", context, status=400)


@role_required(signed_in)
@require_GET
@domain_errors
def change_page(request: HttpRequest, change_id: int) -> HttpResponse:
    review = selectors.change_review(change_id=change_id, subject=_subject(request))
    context = {"review": review, "change": review.change, "exact": canonical_json(review.hashed)}
    return render(request, "console/memory/change.html", context)


@role_required(signed_in)
@require_POST
@domain_errors
def change_confirm(request: HttpRequest, change_id: int) -> HttpResponse:
    """Step 2: apply exactly the change shown (its hash). A conflict goes back to the change's
    page, which now shows the current value beside the proposed one."""
    form = ConfirmForm(request.POST)
    if not form.is_valid():
        return _bad_form(request, form)
    result = services.preference_apply_edit(
        change_id=change_id, shown_hash=form.cleaned_data["proposal_hash"], by=request.user
    )
    if not result.ok:  # the change's page now says so, with both values
        return redirect(f"{PREFERENCES}changes/{change_id}/")
    messages.success(request, f"Saved: now version {result.version}.")
    return redirect(PREFERENCES)


@role_required(signed_in)
@require_POST
@domain_errors
def change_cancel(request: HttpRequest, change_id: int) -> HttpResponse:
    console_services.preference_cancel_edit(change_id=change_id, subject=_subject(request))
    messages.info(request, "Change cancelled: nothing was written.")
    return redirect(PREFERENCES)


@role_required(signed_in)
@require_http_methods(["GET", "POST"])
@domain_errors
def preference_revoke(request: HttpRequest, key: str) -> HttpResponse:
    """GET: the confirmation (key, value, version); POST: revoke that version."""
    if request.method == "GET":
        record = selectors.preference_active_record(subject=_subject(request), key=key)
        return render(request, "console/memory/revoke.html", {"record": record})
    form = RevokeForm(request.POST)
    if not form.is_valid():
        return _bad_form(request, form)
    services.preference_revoke(
        subject=_subject(request),
        key=key,
        by=request.user,
        reason=form.reason_or_default(),
        expected_version=form.cleaned_data["expected_version"],
    )
    messages.success(request, f"Revoked {key}.")
    return redirect(PREFERENCES)


@role_required(signed_in)
@require_GET
@domain_errors
def preferences_export(request: HttpRequest) -> HttpResponse:
    """A download of everything kept: values, versions, history."""
    data = services.preferences_export(subject=_subject(request), by=request.user)
    response = JsonResponse(data, encoder=DjangoJSONEncoder, json_dumps_params={"indent": 2})
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", _subject(request))
    response["Content-Disposition"] = f'attachment; filename="preferences-{name}.json"'
    return response


@role_required(signed_in)
@require_http_methods(["GET", "POST"])
@domain_errors
def preferences_erase(request: HttpRequest) -> HttpResponse:
    """GET: what erasing does, and the typed confirmation; POST: erase if the text matches."""
    if request.method == "GET":
        return render(request, "console/memory/erase.html")
    form = EraseForm(request.POST)
    if not form.is_valid():
        return _bad_form(request, form)
    try:
        erased = console_services.preferences_erase_confirmed(
            subject=_subject(request),
            by=request.user,
            typed=form.cleaned_data["typed"],
            ctx=wiring.context(),
        )
    except console_services.EraseConfirmationMismatch as exc:
        # The same page again, with the code, so the user can simply type it right.
        return render(request, "console/memory/erase.html", {"error": exc}, status=400)
    messages.success(request, f"Erased {erased} preference(s) and every copy of their values.")
    return redirect(PREFERENCES)


@role_required(is_operator)
@require_GET
@domain_errors
def memory_admin(request: HttpRequest) -> HttpResponse:
    form = SearchForm(request.GET)
    if not form.is_valid():
        return _bad_form(request, form)
    found = selectors.memory_admin_search(
        by=request.user,
        subject=form.cleaned_data["subject"],
        key=form.cleaned_data["key"],
        after=form.after(),
    )
    return render(request, "console/memory/admin.html", {"page": found, "q": form.cleaned_data})


@role_required(is_operator)
@require_GET
@domain_errors
def memory_admin_entry(request: HttpRequest, subject: str, key: str) -> HttpResponse:
    entry = selectors.memory_admin_entry(by=request.user, subject=subject, key=key)
    return render(request, "console/memory/admin_entry.html", {"entry": entry})


@role_required(is_operator)
@require_POST
@domain_errors
def memory_admin_revoke(request: HttpRequest, subject: str, key: str) -> HttpResponse:
    form = AdminRevokeForm(request.POST)
    if not form.is_valid():
        return _bad_form(request, form)
    console_services.memory_admin_revoke(
        subject=subject,
        key=key,
        by=request.user,
        reason=form.cleaned_data["reason"],
        expected_version=form.cleaned_data["expected_version"],
    )
    messages.success(request, f"Revoked {subject}'s {key}; the reason is in the audit trail.")
    return redirect("memory-entry", subject=subject, key=key)


urlpatterns: list[URLPattern] = [
    path("preferences/", preferences_page, name="preferences"),
    path("preferences/propose/", preference_propose, name="preference-propose"),
    path("preferences/export/", preferences_export, name="preferences-export"),
    path("preferences/erase/", preferences_erase, name="preferences-erase"),
    path("preferences/changes/<int:change_id>/", change_page, name="preference-change"),
    path("preferences/changes/<int:change_id>/confirm/", change_confirm, name="change-confirm"),
    path("preferences/changes/<int:change_id>/cancel/", change_cancel, name="change-cancel"),
    path("preferences/<str:key>/revoke/", preference_revoke, name="preference-revoke"),
    path("memory/", memory_admin, name="memory-admin"),
    path("memory/<str:subject>/<str:key>/", memory_admin_entry, name="memory-entry"),
    path("memory/<str:subject>/<str:key>/revoke/", memory_admin_revoke, name="memory-revoke"),
]
