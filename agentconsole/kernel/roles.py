"""Roles are groups (created by policy/migrations/0002_roles.py): operator, reviewer, user, admin.

operator  decides pending confirmations; reads every run
reviewer  claims and resolves handoffs; reads every run
user      starts runs for themselves; sees only their own runs and memory
admin     everything (also: a superuser)
"""

from __future__ import annotations

from typing import Any

OPERATOR, REVIEWER, USER, ADMIN = "operator", "reviewer", "user", "admin"


def roles_of(user: Any) -> frozenset[str]:
    if user is None or not getattr(user, "is_authenticated", False):
        return frozenset()
    cached = getattr(user, "_agentconsole_roles", None)
    if cached is None:
        cached = frozenset(user.groups.values_list("name", flat=True))
        if user.is_superuser:
            cached |= {ADMIN}
        user._agentconsole_roles = cached
    return cached


def is_admin(user: Any) -> bool:
    return ADMIN in roles_of(user)


def is_operator(user: Any) -> bool:
    return bool(roles_of(user) & {OPERATOR, ADMIN})


def is_reviewer(user: Any) -> bool:
    return bool(roles_of(user) & {REVIEWER, ADMIN})


def sees_all_runs(user: Any) -> bool:
    return bool(roles_of(user) & {OPERATOR, REVIEWER, ADMIN})


def actor_name(user: Any) -> str:
    """Who did it, as recorded in the trace: a username, a given name, or "system"."""
    if user is None:
        return "system"
    if isinstance(user, str):
        return user[:128]
    return getattr(user, "get_username", lambda: "unknown")()[:128]


def user_or_none(user: Any) -> Any:
    """A user row for a foreign key, or None for a name such as "scenario" or "system"."""
    return user if getattr(user, "pk", None) else None
