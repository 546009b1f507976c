"""Run profiles: services (write) and selectors (read). Rules live in ``runs.domain.profiles``.

``profile_create`` / ``profile_update`` / ``profile_archive`` are the only writers of
``RunProfile``; ``profiles_usable_by`` and ``profile_usable`` answer what a user may start;
``run_from_profile`` starts a run with exactly the profile's grants, expanded for the subject.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from agentconsole.kernel.roles import actor_name, is_operator
from policy.domain.errors import DomainError
from policy.domain.secrets.redaction import redact_secrets
from policy.domain.tool_policy import ToolPolicyInvalid, parse_tool_policy, tool_facts
from runs import selectors, services
from runs.context import RunsContext, resolve
from runs.domain.profiles import (
    ProfileBudgets,
    ProfileInvalid,
    ProfileSpec,
    expand_grants,
    same_profile,
    validate_profile,
)
from runs.domain.state import RunState
from runs.models import RunProfile


class ProfileNotFound(DomainError):
    """Unknown, archived, or not for this user: the same answer (its existence is not shown)."""

    code = "PROFILE_NOT_FOUND"
    http_status = 404


class ProfileConflict(DomainError):
    """The write meets another: ``PROFILE_NAME_TAKEN``, ``PROFILE_VERSION_CONFLICT`` (edited
    since the form was loaded), ``PROFILE_ARCHIVED``."""

    code = "PROFILE_CONFLICT"
    http_status = 409


def _validated(data: Mapping[str, Any], ctx: RunsContext | None) -> ProfileSpec:
    context = resolve(ctx)
    return validate_profile(
        data,
        tools=tool_capabilities(ctx=ctx),
        endpoints=model_endpoint_names(),
        policy_tools=tool_facts(context.registry()),
        deployment=context.tool_policy(),
    )


def tool_capabilities(*, ctx: RunsContext | None = None) -> dict[str, tuple[str, ...]]:
    """Each registered tool name with the capabilities it requires (all its versions)."""
    out: dict[str, set[str]] = {}
    for contract in resolve(ctx).registry():
        out.setdefault(contract.name, set()).update(contract.required_capabilities)
    return {name: tuple(sorted(caps)) for name, caps in sorted(out.items())}


def model_endpoint_names() -> list[str]:
    """The model endpoints a profile's planner may name (``settings``; never their URL or key)."""
    return sorted(getattr(settings, "AGENTCONSOLE_MODEL_ENDPOINTS", {}))


# --- selectors ---------------------------------------------------------------------------------


def profiles_all() -> QuerySet[RunProfile]:
    """Every profile, archived ones too (the operators' list), with who is named."""
    return RunProfile.objects.prefetch_related("users", "groups").order_by(
        F("archived_at").asc(nulls_first=True), "name"
    )


def profile_get(*, profile_id: int) -> RunProfile:
    row = profiles_all().filter(pk=profile_id).first()
    if row is None:
        raise ProfileNotFound("no such profile", profile_id=profile_id)
    return row


def profile_shown(row: RunProfile) -> RunProfile:
    """``row`` as pages and the API show it, its secrets masked: a profile saved before the
    scanner ran on profiles may hold them (issue 21 item 11). Changes the instance, never the
    table: callers only render it."""
    row.description = redact_secrets(row.description)
    row.planner = redact_secrets(row.planner)
    row.grant_templates = redact_secrets(row.grant_templates)
    row.tool_policy = redact_secrets(row.tool_policy)
    return row


def profile_form_shown(row: RunProfile) -> dict[str, Any]:
    """``profile_form_data`` for the edit form, its secrets masked (``profile_shown``)."""
    shown: dict[str, Any] = redact_secrets(profile_form_data(row))
    return shown


def profiles_usable_by(*, user: Any) -> QuerySet[RunProfile]:
    """Active profiles ``user`` may start runs from: for everyone, naming them, or one of their
    groups. Subqueries, not joins: a user in two named groups sees a profile once."""
    if not getattr(user, "is_authenticated", False):
        return RunProfile.objects.none()
    named = RunProfile.users.through.objects.filter(user=user).values("runprofile_id")
    grouped = RunProfile.groups.through.objects.filter(group__user=user).values("runprofile_id")
    return RunProfile.objects.filter(archived_at__isnull=True).filter(
        Q(audience="all") | Q(audience="users", pk__in=named) | Q(audience="groups", pk__in=grouped)
    )


def profile_usable(*, user: Any, ref: str | int) -> RunProfile:
    """The profile named (or numbered) ``ref``, if ``user`` may use it."""
    qs = profiles_usable_by(user=user)
    text = str(ref)
    row = (qs.filter(pk=int(text)) if text.isdigit() else qs.filter(name=text)).first()
    if row is None:
        raise ProfileNotFound("no such profile, or not one you may use", profile=text[:64])
    return row


def profiles_for_start(*, user: Any) -> list[tuple[RunProfile, list[dict[str, Any]]]]:
    """The profiles ``user`` may start, each with the grants a run of theirs would get (the
    templates expanded for their name; the templates themselves where the name cannot be
    expanded, and then starting refuses with the reason)."""
    out = []
    for profile in profiles_usable_by(user=user).order_by("name"):
        try:
            grants = expand_grants(profile.grant_templates, subject=user.get_username())
        except ProfileInvalid:
            grants = list(profile.grant_templates)
        out.append((profile_shown(profile), redact_secrets(grants)))
    return out


def profile_form_data(profile: RunProfile) -> dict[str, Any]:
    """A stored profile as the data ``validate_profile`` takes (for the edit form)."""
    return {
        "name": profile.name,
        "description": profile.description,
        "audience": profile.audience,
        "users": sorted(u.get_username() for u in profile.users.all()),
        "groups": sorted(g.name for g in profile.groups.all()),
        "planner": profile.planner,
        "tools": profile.tools,
        "grant_templates": profile.grant_templates,
        "budgets": profile.budgets,
        "tool_policy": profile.tool_policy,
    }


# --- services ----------------------------------------------------------------------------------


def _audience(spec: ProfileSpec) -> tuple[list[Any], list[Group]]:
    users = list(get_user_model().objects.filter(username__in=spec.users))
    groups = list(Group.objects.filter(name__in=spec.groups))
    missing = sorted(set(spec.users) - {u.get_username() for u in users})
    missing += sorted(set(spec.groups) - {g.name for g in groups})
    if missing:
        raise ProfileInvalid(
            f"no user or group named {missing[0]!r}",
            code="PROFILE_AUDIENCE_UNKNOWN",
            name=missing[0],
        )
    return users, groups


def _fields(spec: ProfileSpec) -> dict[str, Any]:
    data = spec.data()
    keep = ("audience", "planner", "tools", "budgets", "tool_policy")
    # The description is shown to every user the profile is for: stored with its secrets
    # masked (issue 21 item 11). The other parts hold none (the domain refused them).
    return {k: data[k] for k in keep} | {
        "description": redact_secrets(data["description"]),
        "grant_templates": data["grant_templates"],
    }


def _name_free(name: str, *, but: int | None = None) -> None:
    # The friendly refusal. Two creates racing for one name both pass it: the unique constraint
    # decides, and the loser's IntegrityError becomes this same refusal (``profile_create``).
    qs = RunProfile.objects.filter(name=name)
    if (qs.exclude(pk=but) if but is not None else qs).exists():
        raise ProfileConflict(f"a profile named {name!r} exists", code="PROFILE_NAME_TAKEN")


def profile_create(
    *, data: Mapping[str, Any], by: Any, ctx: RunsContext | None = None
) -> RunProfile:
    """Validate through the domain, then write the profile and its audience in one transaction
    (a bad template writes nothing)."""
    spec = _validated(data, ctx)
    users, groups = _audience(spec)
    _name_free(spec.name)
    try:
        with transaction.atomic():
            row = RunProfile.objects.create(
                name=spec.name, created_by=by, updated_by=by, **_fields(spec)
            )
            row.users.set(users)
            row.groups.set(groups)
    except IntegrityError:
        _name_free(spec.name)  # the name was taken concurrently: refuse in words
        raise
    return row


def profiles_load(
    *, data: Sequence[Mapping[str, Any]], by: Any, ctx: RunsContext | None = None
) -> tuple[list[str], list[str]]:
    """Create the profiles whose name is free, in one transaction (one refused: none written);
    a profile that exists by that name is kept as it is, an operator's edits included, so a
    deploy script may load the same files again. Returns (created, kept) names.

    ``by`` becomes the profile's author, whose grants a run gets: an operator or an admin, as
    on the console's profile pages."""
    if not (getattr(by, "is_active", False) and is_operator(by)):
        raise ProfileInvalid(
            f"{actor_name(by)!r} is not an operator or an admin: only they define profiles",
            code="PROFILE_AUTHOR_NOT_OPERATOR",
        )
    created, kept = [], []
    with transaction.atomic():
        for item in data:
            name = item.get("name") if isinstance(item, Mapping) else None
            if isinstance(name, str) and RunProfile.objects.filter(name=name).exists():
                kept.append(name)
                continue
            created.append(profile_create(data=item, by=by, ctx=ctx).name)
    return created, kept


def profile_update(
    *,
    profile_id: int,
    data: Mapping[str, Any],
    expected_version: int,
    by: Any,
    current: RunProfile | None = None,
    ctx: RunsContext | None = None,
) -> RunProfile:
    """Replace a profile's definition if it is still the version the editor saw.

    The race: two operators edit one profile from the same page; the compare-and-set on
    ``version`` lets the first win and gives the second ``PROFILE_VERSION_CONFLICT``.
    ``current``: the row as the caller read it (``profile_get``), so it is not read again.
    """
    if current is None:
        current = profile_get(profile_id=profile_id)
    if current.archived_at is not None:
        raise ProfileConflict(
            code="PROFILE_ARCHIVED",
            message="an archived profile is not edited",
            profile_id=profile_id,
        )
    spec = _validated(data, ctx)
    users, groups = _audience(spec)
    if same_profile(profile_form_data(current), spec.data()):
        return current  # nothing changed: no new version
    with transaction.atomic():
        _name_free(spec.name, but=profile_id)
        changed = RunProfile.objects.filter(
            pk=profile_id, version=expected_version, archived_at__isnull=True
        ).update(
            name=spec.name,
            updated_by=by,
            updated_at=timezone.now(),
            version=F("version") + 1,
            **_fields(spec),
        )
        if changed == 0:
            raise ProfileConflict(
                code="PROFILE_VERSION_CONFLICT",
                message="the profile changed since you opened it",
                profile_id=profile_id,
            )
        row = RunProfile.objects.get(pk=profile_id)
        row.users.set(users)
        row.groups.set(groups)
    return row


def profile_archive(*, profile_id: int, by: Any) -> RunProfile:
    """Nobody can start a run from it any more; runs already started keep their grants."""
    RunProfile.objects.filter(pk=profile_id, archived_at__isnull=True).update(
        archived_at=timezone.now(), updated_by=by, version=F("version") + 1
    )
    return profile_get(profile_id=profile_id)


def run_from_profile(
    *,
    user: Any,
    ref: str | int,
    goal: str,
    subject: str | None = None,
    ctx: RunsContext | None = None,
    enqueue: bool = True,
) -> RunState:
    """Start a run from a profile ``user`` may use: the profile's planner, budgets and exactly
    its grants, each template expanded for the run's subject and bound to the new run.

    The subject is the user's own name unless the caller (an entry point that checked that
    ``user`` is an admin) names another. The grants are the operator's (``granted_by``: whoever
    last defined the profile), never the user's."""
    profile = profile_usable(user=user, ref=ref)
    subject = subject or user.get_username()
    grants: Sequence[dict[str, Any]] = expand_grants(profile.grant_templates, subject=subject)
    context = resolve(ctx)
    # Checked again against today's deployment and tools (either may have changed since the
    # profile was saved); the run records the join, never a policy looser than the deployment.
    facts = tool_facts(context.registry())
    try:
        policy = parse_tool_policy(
            profile.tool_policy, tools={n: facts[n] for n in profile.tools if n in facts}
        )
    except ToolPolicyInvalid as exc:
        raise ProfileInvalid(exc.message, code=exc.code, **exc.extra) from None
    return services.run_create(
        subject=subject,
        goal=goal,
        budgets=ProfileBudgets.model_validate(profile.budgets).run_budgets(),
        grants=grants,
        planner=dict(profile.planner),
        owner=user,
        granted_by=profile.updated_by or profile.created_by,
        enqueue=enqueue,
        ctx=ctx,
        profile_policy=policy,
        profile=profile,
    )


def run_again(
    *, user: Any, run_id: str, ctx: RunsContext | None = None, enqueue: bool = True
) -> RunState:
    """A new run with the goal and the profile of a run ``user`` may see, started as
    ``run_from_profile`` starts one: the profile's rules of today (an operator's edit since
    applies), ``user``'s own subject, ``run_create``'s limits and creation rate.

    A run not started from a profile, or whose profile was deleted, archived or is no longer
    for ``user``: ``PROFILE_NOT_FOUND``, the answer ``/runs/new/`` gives for it. A run the
    user may not see: ``NOT_FOUND``. The goal is the one stored: its secrets were masked."""
    run = selectors.access_run(user=user, run_id=run_id)
    if run.profile_id is None:
        raise ProfileNotFound(
            "this run was not started from a profile that still exists", run_id=run.pk
        )
    return run_from_profile(user=user, ref=run.profile_id, goal=run.goal, ctx=ctx, enqueue=enqueue)
