"""The notifications page (operators and admins; 404 to others). Thin: parse the form, call one
service or selector, render.

``/notifications/``: the subscriptions, a form to add one, the delivery log. A refused form
comes back with its values kept (the secret excepted: it is never written into a page) and the
refusal's stable code, status 400. ``/notifications/<id>/remove/``: remove one.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_http_methods, require_POST

from agentconsole.kernel.pages import domain_errors, page_error, role_required
from agentconsole.kernel.roles import is_operator
from agentconsole.kernel.status import domain_status
from notify import selectors, services
from notify.domain.rules import EventKind, TargetKind, is_loopback
from notify.forms import EVENT_LABELS, SubscriptionForm, form_error
from policy.domain.errors import DomainError
from runs.start import profiles

PAGE = "/notifications/"
NEW = {"kind": TargetKind.WEBHOOK.value, "events": [k.value for k in EventKind]}


def _profile_names() -> list[str]:
    return sorted(p.name for p in profiles.profiles_all() if p.archived_at is None)


def _page(
    request: HttpRequest,
    form: SubscriptionForm,
    error: dict[str, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    subscriptions = list(selectors.subscriptions_live())
    context: dict[str, Any] = {
        "subscriptions": subscriptions,
        "form": form,
        "error": error,
        "deliveries": selectors.deliveries_recent(),
        "log_size": selectors.LOG_SIZE,
        "event_labels": EVENT_LABELS,
        "loopback": {s.pk for s in subscriptions if s.url and is_loopback(s.url)},
    }
    return render(request, "console/notify/page.html", context, status=status)


@role_required(is_operator)
@require_http_methods(["GET", "POST"])
def notifications_page(request: HttpRequest) -> HttpResponse:
    names = _profile_names()
    if request.method == "GET":
        return _page(request, SubscriptionForm(profiles=names, initial=NEW))
    if "kind" not in request.POST:
        # Not this page's form (a JSON body, a script's guess): a short refusal, not the page.
        return page_error(request, "VALIDATION_ERROR", "This is not the subscription form.", 400)
    form = SubscriptionForm(request.POST, profiles=names)
    if not form.is_valid():
        error = {"code": "VALIDATION_ERROR", "message": form_error(form)}
        return _page(request, form, error, 400)
    data = form.cleaned_data
    try:
        row = services.subscription_create(
            kind=data["kind"],
            events=data["events"],
            url=data["url"],
            secret=data["secret"],
            email=data["email"],
            role=data["role"],
            profile=data["profile"],
            known_profiles=names,
            by=request.user,
        )
    except DomainError as exc:
        error = {"code": exc.code, "message": exc.message}
        return _page(request, form, error, domain_status(exc))
    messages.success(request, f"Subscription {row.pk} added: new items are sent to {row.target}.")
    return redirect(PAGE)


@role_required(is_operator)
@require_POST
@domain_errors
def subscription_remove(request: HttpRequest, subscription_id: int) -> HttpResponse:
    services.subscription_remove(subscription_id=subscription_id)
    messages.success(request, f"Subscription {subscription_id} removed; nothing more is sent.")
    return redirect(PAGE)


urlpatterns: list[URLPattern] = [
    path("notifications/", notifications_page, name="notifications"),
    path(
        "notifications/<int:subscription_id>/remove/",
        subscription_remove,
        name="notification-subscription-remove",
    ),
]
