"""What every console page knows about the person looking at it: their roles and the links of the
top bar. Pages still check rights themselves (agentconsole.kernel.pages.role_required); this only
decides what is shown."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from agentconsole.kernel.roles import is_admin, is_operator, is_reviewer, roles_of

# (label, path, who sees the link). Counts ("pending", "handoffs") are filled live by console.js
# from /ws/console/ for operators and reviewers.
_NAV: tuple[tuple[str, str, str, str], ...] = (
    ("Runs", "/runs/", "everyone", ""),
    ("New run", "/runs/new/", "everyone", ""),
    ("Confirmations", "/confirmations/", "operator", "pending_confirmations"),
    ("Handoffs", "/handoffs/", "reviewer", "open_handoffs"),
    ("Profiles", "/profiles/", "operator", ""),
    ("Tools", "/tools/", "operator", ""),
    ("Memory", "/memory/", "operator", ""),
    ("Notifications", "/notifications/", "operator", ""),
    ("My preferences", "/preferences/", "everyone", ""),
    # The Django admin (read-only records, accounts and their roles): only who may enter it.
    ("Admin", "/admin/", "admin", ""),
)


def _may(user: Any, who: str) -> bool:
    if who == "operator":
        return is_operator(user)
    if who == "admin":
        return is_admin(user) and bool(user.is_staff)
    if who == "reviewer":
        return is_reviewer(user) or is_operator(user)
    return True


def console(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"roles": frozenset(), "nav": []}
    path = request.path_info
    visible = [(label, href, count) for label, href, who, count in _NAV if _may(user, who)]
    # The most specific link is the current one ("/runs/new/" over "/runs/").
    current = max((href for _, href, _ in visible if path.startswith(href)), key=len, default="")
    nav = [
        {"label": label, "path": href, "count": count, "current": href == current}
        for label, href, count in visible
    ]
    return {
        "roles": roles_of(user),
        "nav": nav,
        "is_operator": is_operator(user),
        "is_reviewer": is_reviewer(user),
        "is_admin": is_admin(user),
        "watches_queues": is_operator(user) or is_reviewer(user),
    }
