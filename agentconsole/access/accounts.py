"""Accounts and their roles from a shell (``manage.py grant_role``): the first hour of an install,
and any deploy script that keeps the roles as it wants them.

A role is a group (agentconsole/kernel/roles.py, created by policy/migrations/0002_roles.py).
``admin`` also makes the account a Django superuser and staff: the console treats a superuser as an
admin, and the Django admin shows its models only to superusers (nobody is given model permissions
one by one). Every service here is idempotent: asking for what is already so changes nothing and
says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction

from agentconsole.access.demo_passwords import DEMO_PASSWORDS
from agentconsole.kernel.roles import ADMIN, OPERATOR, REVIEWER, USER
from policy.domain.errors import DomainError

ROLES: tuple[str, ...] = (OPERATOR, REVIEWER, USER, ADMIN)


class AccountError(DomainError):
    """``ROLE_UNKNOWN``, ``USER_NOT_FOUND``, ``PASSWORD_INVALID``, ``PASSWORD_IS_DEMO``,
    ``ROLE_GROUP_MISSING`` (the roles' migration has not run)."""

    code = "ACCOUNT_ERROR"


@dataclass
class RoleChange:
    """What a call did: the account, whether it was created, the roles changed and those that
    were already as asked (an empty ``changed`` is a call that had nothing to do)."""

    username: str
    created: bool = False
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def _roles(names: Sequence[str]) -> list[str]:
    unknown = [n for n in names if n not in ROLES]
    if unknown or not names:
        raise AccountError(
            f"not a role: {', '.join(unknown) or '(none given)'}; the roles are {', '.join(ROLES)}",
            code="ROLE_UNKNOWN",
            unknown=unknown,
        )
    return list(dict.fromkeys(names))


def _groups(names: Sequence[str]) -> dict[str, Group]:
    groups = {g.name: g for g in Group.objects.filter(name__in=names)}
    missing = [n for n in names if n not in groups]
    if missing:
        raise AccountError(
            f"the role groups {', '.join(missing)} do not exist: run manage.py migrate first",
            code="ROLE_GROUP_MISSING",
        )
    return groups


def _checked_password(username: str, password: str) -> str:
    """Django's password validators (settings.AUTH_PASSWORD_VALIDATORS), and never a demo
    account's public password in production (every process would refuse to start with it)."""
    if not settings.DEBUG and DEMO_PASSWORDS.get(username) == password:
        raise AccountError(
            f"{password!r} is the public demo password of {username!r}: choose another",
            code="PASSWORD_IS_DEMO",
        )
    try:
        password_validation.validate_password(password, get_user_model()(username=username))
    except ValidationError as exc:
        raise AccountError(
            "the password is refused: " + " ".join(exc.messages), code="PASSWORD_INVALID"
        ) from None
    return password


def role_grant(
    *, username: str, roles: Sequence[str], create: bool = False, password: str | None = None
) -> RoleChange:
    """Give ``username`` these roles (in one transaction: all of them or none).

    ``create``: make the account when there is none, with ``password`` (validated) or, without
    one, an unusable password to be set later (``manage.py changepassword``, or the Django
    admin). An existing account's password is never touched, so a script may run this again."""
    wanted = _roles(roles)
    groups = _groups(wanted)
    user_model = get_user_model()
    if password is not None:
        password = _checked_password(username, password)
    with transaction.atomic():
        user = user_model.objects.select_for_update().filter(username=username).first()
        change = RoleChange(username=username)
        if user is None:
            if not create:
                raise AccountError(
                    f"no account named {username!r} (--create makes it)", code="USER_NOT_FOUND"
                )
            user = user_model(username=username)
            if password is None:
                user.set_unusable_password()
            else:
                user.set_password(password)
            user.save()
            change.created = True
        held = set(user.groups.values_list("name", flat=True))
        for name in wanted:
            if name in held and (name != ADMIN or user.is_superuser):
                change.unchanged.append(name)
                continue
            user.groups.add(groups[name])
            change.changed.append(name)
        if ADMIN in change.changed:
            user.is_staff = user.is_superuser = True
            user.save(update_fields=["is_staff", "is_superuser"])
    return change


def role_revoke(*, username: str, roles: Sequence[str]) -> RoleChange:
    """Take these roles from ``username``. Revoking ``admin`` also ends superuser and staff
    (a superuser is an admin whatever its groups say)."""
    wanted = _roles(roles)
    with transaction.atomic():
        user: Any = get_user_model().objects.select_for_update().filter(username=username).first()
        if user is None:
            raise AccountError(f"no account named {username!r}", code="USER_NOT_FOUND")
        held = set(user.groups.values_list("name", flat=True))
        change = RoleChange(username=username)
        for name in wanted:
            if name in held or (name == ADMIN and user.is_superuser):
                change.changed.append(name)
            else:
                change.unchanged.append(name)
        user.groups.remove(*Group.objects.filter(name__in=change.changed))
        if ADMIN in change.changed:
            user.is_staff = user.is_superuser = False
            user.save(update_fields=["is_staff", "is_superuser"])
    return change
