"""Console pages (views/profiles). Thin: check rights, call services and selectors, render.

``/profiles/`` (operators): the profiles, and a form to define one; ``/profiles/<id>/``: edit;
``/profiles/<id>/archive/``: archive. ``/runs/new/`` (everyone): start a run from a profile
you may use, with a goal; you land on the new run's page.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_http_methods, require_POST

from agentconsole import wiring
from agentconsole.kernel.pages import domain_errors, page_error, role_required, signed_in
from agentconsole.kernel.roles import is_operator
from agentconsole.kernel.status import domain_status
from policy.domain.errors import DomainError
from runs.domain.profiles import ProfileBudgets
from runs.start import profiles
from runs.start.limits import LimitError
from runs.views.profile_forms import ProfileForm, StartRunForm, initial_from

FORM_INVALID = "FORM_INVALID"
NEW_PROFILE = {
    "audience": "all",
    "planner_kind": "fixture",
    "planner_outputs": "[]",
    "grant_templates": "[]",
    "tool_policy": "{}",
    **ProfileBudgets().model_dump(),
}


def _form(request: HttpRequest, *args: Any, **kwargs: Any) -> ProfileForm:
    """The profile form with the deployment's tools, the capabilities they need (a grant
    row's choices) and endpoints; ``?grants=json`` opens the grants on the JSON tab."""
    tools = profiles.tool_capabilities(ctx=wiring.context())
    return ProfileForm(
        *args,
        tools=list(tools),
        endpoints=profiles.model_endpoint_names(),
        capabilities=sorted({cap for caps in tools.values() for cap in caps}),
        json_tab=request.GET.get("grants") == "json",
        **kwargs,
    )


def _refusal(form: Any, error: DomainError | None) -> tuple[dict[str, str], int]:
    """What the page says about a refused form: the stable code in words, and the status."""
    if error is not None:
        return {"code": error.code, "message": error.message}, domain_status(error)
    first = next(iter(form.errors.items()))
    label = form.fields[first[0]].label if first[0] in form.fields else "Form"
    return {"code": FORM_INVALID, "message": f"{label or first[0]}: {first[1][0]}"}, 400


def _foreign_post(request: HttpRequest, form_class: type[Any]) -> HttpResponse | None:
    """A POST that carries none of this page's form fields (another content type, a script's
    JSON) is not a form to show again with its errors: a short error page says so."""
    if any(name in form_class.base_fields for name in request.POST):
        return None
    return page_error(request, FORM_INVALID, "This page takes its own form; nothing was saved.")


def _list_page(request: HttpRequest, form: ProfileForm, error: dict[str, str] | None = None,
               status: int = 200) -> HttpResponse:  # fmt: skip
    rows = [profiles.profile_shown(row) for row in profiles.profiles_all()]
    context = {"profiles": rows, "form": form, "error": error}
    return render(request, "console/profiles/list.html", context, status=status)


def _submit(
    request: HttpRequest,
    save: Callable[[ProfileForm], Any],
    saved: Callable[[Any], HttpResponse],
    again: Callable[[ProfileForm, dict[str, str], int], HttpResponse],
) -> HttpResponse:
    """A profile form posted: ``save`` it (a service call), then ``saved`` (a redirect); a form
    that is not this page's, invalid, or refused by the service is shown ``again`` with the
    refusal's code, nothing saved."""
    foreign = _foreign_post(request, ProfileForm)
    if foreign is not None:
        return foreign
    form = _form(request, request.POST)
    failure: DomainError | None = None
    if form.is_valid():
        try:
            return saved(save(form))
        except DomainError as exc:
            failure = exc
            form.place_refusal(exc)  # beside its field too, with its code
    error, status = _refusal(form, failure)
    return again(form, error, status)


@role_required(is_operator)
@require_http_methods(["GET", "POST"])
def profile_list(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return _list_page(request, _form(request, initial=NEW_PROFILE))

    def save(form: ProfileForm) -> Any:
        return profiles.profile_create(
            data=form.profile_data(), by=request.user, ctx=wiring.context()
        )

    def saved(row: Any) -> HttpResponse:
        messages.success(request, f"Profile {row.name} saved. Users can start runs from it.")
        # The form posts to #new-profile (a refusal shows there); the list starts at #main.
        return redirect("/profiles/#main")

    return _submit(request, save, saved, functools.partial(_list_page, request))


def _edit_page(request: HttpRequest, row: Any, form: ProfileForm,
               error: dict[str, str] | None = None, status: int = 200) -> HttpResponse:  # fmt: skip
    context = {"profile": row, "form": form, "error": error}
    return render(request, "console/profiles/edit.html", context, status=status)


@role_required(is_operator)
@require_http_methods(["GET", "POST"])
@domain_errors
def profile_edit(request: HttpRequest, profile_id: int) -> HttpResponse:
    row = profiles.profile_get(profile_id=profile_id)
    if request.method == "GET":
        initial = initial_from(profiles.profile_form_shown(row), version=row.version)
        return _edit_page(request, row, _form(request, initial=initial))

    def save(form: ProfileForm) -> Any:
        return profiles.profile_update(
            profile_id=profile_id,
            data=form.profile_data(),
            expected_version=form.cleaned_data["version"] or 0,
            by=request.user,
            current=row,
            ctx=wiring.context(),
        )

    def saved(updated: Any) -> HttpResponse:
        messages.success(request, f"Profile {updated.name} saved (version {updated.version}).")
        return redirect("/profiles/")

    return _submit(request, save, saved, functools.partial(_edit_page, request, row))


@role_required(is_operator)
@require_POST
@domain_errors
def profile_archive(request: HttpRequest, profile_id: int) -> HttpResponse:
    row = profiles.profile_archive(profile_id=profile_id, by=request.user)
    messages.success(request, f"Profile {row.name} archived: nobody can start a run from it.")
    return redirect("/profiles/")


@role_required(signed_in)
@require_http_methods(["GET", "POST"])
@domain_errors
def run_new(request: HttpRequest) -> HttpResponse:
    choices = profiles.profiles_for_start(user=request.user)
    usable = [profile for profile, _ in choices]
    if request.method == "GET":
        form = StartRunForm(profiles=usable, initial={"profile": request.GET.get("profile")})
        return render(request, "console/profiles/new_run.html", {"form": form, "choices": choices})
    form = StartRunForm(request.POST, profiles=usable)
    if not form.is_valid():
        error, status = _refusal(form, None)
        if "profile" in form.errors:
            # Unknown, archived or not yours: one answer, in the API's words.
            error["code"] = profiles.ProfileNotFound.code
        context = {"form": form, "choices": choices, "error": error}
        return render(request, "console/profiles/new_run.html", context, status=status)
    try:
        state = profiles.run_from_profile(
            user=request.user,
            ref=form.cleaned_data["profile"],
            goal=form.cleaned_data["goal"],
            ctx=wiring.context(),
        )
    except LimitError as exc:
        # The creation rate, the active runs, today's steps: the form again as typed, with the
        # limit's code and status (429), and Retry-After when waiting lifts it.
        context = {"form": form, "choices": choices, "error": _refusal(form, exc)[0]}
        page = render(request, "console/profiles/new_run.html", context, status=domain_status(exc))
        if exc.retry_after_s:
            page["Retry-After"] = str(exc.retry_after_s)
        return page
    return redirect(f"/runs/{state.run_id}/")


urlpatterns: list[URLPattern] = [
    path("profiles/", profile_list, name="profiles"),
    path("profiles/<int:profile_id>/", profile_edit, name="profile-edit"),
    path("profiles/<int:profile_id>/archive/", profile_archive, name="profile-archive"),
    path("runs/new/", run_new, name="run-new"),
]
