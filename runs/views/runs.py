"""Console pages (views/runs): the runs list and a run's detail with its live trace, and cancel.
Thin: check rights, parse input with a form, call one selector or service, render."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agentconsole import wiring
from agentconsole.kernel.pages import domain_errors, page_error, role_required, signed_in
from policy.domain.errors import DomainError
from runs.domain.machine import StopReason
from runs.domain.writes import WRITES_NOT_APPLIED
from runs.start import profiles
from runs.start.limits import LimitError
from runs.web import console_selectors as cs
from runs.web import console_services

_DATE = forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")
# Kept in the links of the status counts and the pager, in this order.
KEPT = ("subject", "q", "outcome_flag", "created_from", "created_to", "tool", "stop_reason")


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
    created_from = forms.DateField(required=False, label="From", widget=_DATE)
    created_to = forms.DateField(required=False, label="To", widget=_DATE)
    tool = forms.ChoiceField(required=False, label="Tool used")
    stop_reason = forms.ChoiceField(
        choices=[("", "Any stop reason")] + [(r.value, r.value) for r in StopReason],
        required=False,
        label="Stop reason",
    )
    cursor = forms.CharField(max_length=400, required=False)

    def __init__(self, *args: Any, tools: list[str], **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["tool"].choices = [("", "Any tool")] + [(t, t) for t in tools]  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("created_from"), data.get("created_to")
        if start and end and end < start:
            self.add_error("created_to", "The end date is before the start date.")
        return data

    def time_range(self) -> tuple[datetime | None, datetime | None]:
        """The dates as [start of ``from``, start of the day after ``to``) in the site's time
        zone: both days are included."""
        start, end = self.cleaned_data["created_from"], self.cleaned_data["created_to"]
        after = _day_start(start) if start else None
        # The last day a date input takes has no next day: no upper bound then.
        before = _day_start(end + timedelta(days=1)) if end and end < date.max else None
        return after, before


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


class CancelForm(forms.Form):
    reason = forms.CharField(max_length=256, required=False, strip=True)


@require_GET
@role_required(signed_in)
@domain_errors
def run_list(request: HttpRequest) -> HttpResponse:
    form = RunFilters(request.GET, tools=list(profiles.tool_capabilities(ctx=wiring.context())))
    if not form.is_valid():
        # The page again with each bad filter's error beside it and what was typed kept; no
        # runs are read (a filter that cannot be applied shows nothing, not everything).
        labels = ", ".join(str(form.fields[n].label or n) for n in form.errors if n in form.fields)
        said = f"These filters are not valid: {labels}."
        context: dict[str, Any] = {
            "page": cs.EMPTY_PAGE,
            "form": form,
            "filters": {},
            "keep": {},
            "error": {"code": "FILTER_INVALID", "message": said},
        }
        # htmx swaps no 4xx answer: as you type, the results part says why it is empty.
        status = 200 if request.headers.get("HX-Request") else 400
        return render(request, "console/runs/list.html", context, status=status)
    f = form.cleaned_data
    after = cs.cursor_decode(f["cursor"]) if f["cursor"] else None  # CURSOR_INVALID: 400
    created_from, created_before = form.time_range()
    page = cs.runs_page(
        user=request.user,
        status=f["status"],
        subject=f["subject"],
        text=f["q"],
        outcome_flag=f["outcome_flag"],
        created_from=created_from,
        created_before=created_before,
        tool=f["tool"],
        stop_reason=f["stop_reason"],
        after=after,
        size=cs.PAGE_SIZE,
    )
    keep = {k: form.data[k] for k in KEPT if f.get(k)}
    context = {"page": page, "form": form, "filters": f, "keep": keep, "error": None}
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


@require_POST
@role_required(signed_in)
def run_again(request: HttpRequest, run_id: str) -> HttpResponse:
    """Start the run's goal again with its profile (runs.start.profiles.run_again) and go to the new
    run; a refusal is the error page with run_create's code (429 and Retry-After for a rate)."""
    try:
        state = profiles.run_again(user=request.user, run_id=run_id, ctx=wiring.context())
    except DomainError as exc:
        page = page_error(request, exc)
        if isinstance(exc, LimitError) and exc.retry_after_s:
            page["Retry-After"] = str(exc.retry_after_s)
        return page
    messages.success(request, "Started again: a new run with the same goal and profile.")
    return redirect("console-run", run_id=state.run_id)


urlpatterns: list[URLPattern] = [
    path("runs/", run_list, name="console-runs"),
    path("runs/<str:run_id>/", run_detail, name="console-run"),
    path("runs/<str:run_id>/cancel/", run_cancel, name="console-run-cancel"),
    path("runs/<str:run_id>/again/", run_again, name="console-run-again"),
]
