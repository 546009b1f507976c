"""Console pages (views/runs): the runs list and a run's detail with its live trace, and cancel.
Thin: check rights, parse input with a form, call one selector or service, render."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_GET, require_POST

from agentconsole import wiring
from policy.pages import domain_errors, page_error, role_required, signed_in
from runs import console_selectors as cs
from runs import console_services
from runs.domain.writes import WRITES_NOT_APPLIED


class RunFilters(forms.Form):
    status = forms.ChoiceField(
        choices=[("", "Any status")] + [(s, s.replace("_", " ")) for s in cs.STATUSES],
        required=False,
    )
    subject = forms.CharField(max_length=128, required=False, strip=True)
    q = forms.CharField(max_length=200, required=False, strip=True, label="Goal contains")
    outcome_flag = forms.ChoiceField(
        choices=[("", "Any outcome"), (WRITES_NOT_APPLIED, "Write not applied")],
        required=False,
        label="Outcome",
    )
    cursor = forms.CharField(max_length=400, required=False)


class CancelForm(forms.Form):
    reason = forms.CharField(max_length=256, required=False, strip=True)


@require_GET
@role_required(signed_in)
@domain_errors
def run_list(request: HttpRequest) -> HttpResponse:
    form = RunFilters(request.GET)
    if not form.is_valid():
        fields = ", ".join(sorted(form.errors))
        return page_error(request, "FILTER_INVALID", f"These filters are not valid: {fields}.")
    f = form.cleaned_data
    after = cs.cursor_decode(f["cursor"]) if f["cursor"] else None  # CURSOR_INVALID: 400
    page = cs.runs_page(
        user=request.user,
        status=f["status"],
        subject=f["subject"],
        text=f["q"],
        outcome_flag=f["outcome_flag"],
        after=after,
        size=cs.PAGE_SIZE,
    )
    kept = (("subject", f["subject"]), ("q", f["q"]), ("outcome_flag", f["outcome_flag"]))
    keep = {k: v for k, v in kept if v}
    context: dict[str, Any] = {"page": page, "form": form, "filters": f, "keep": keep}
    return render(request, "console/runs/list.html", context)


@require_GET
@role_required(signed_in)
@domain_errors
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    detail = cs.run_detail(user=request.user, run_id=run_id)  # NOT_FOUND: 404
    return render(request, "console/runs/detail.html", {"d": detail, "run": detail.run})


@require_POST
@role_required(signed_in)
@domain_errors
def run_cancel(request: HttpRequest, run_id: str) -> HttpResponse:
    form = CancelForm(request.POST)
    if not form.is_valid():
        return page_error(request, "VALIDATION_ERROR", "The reason is at most 256 characters.")
    console_services.run_cancel_by(
        user=request.user,
        run_id=run_id,
        reason=form.cleaned_data["reason"] or "cancelled from the console",
        ctx=wiring.context(),
    )
    messages.success(request, "Cancel requested: no new tool starts; the run stops shortly.")
    return redirect("console-run", run_id=run_id)


urlpatterns: list[URLPattern] = [
    path("runs/", run_list, name="console-runs"),
    path("runs/<str:run_id>/", run_detail, name="console-run"),
    path("runs/<str:run_id>/cancel/", run_cancel, name="console-run-cancel"),
]
