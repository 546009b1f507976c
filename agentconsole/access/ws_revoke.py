"""Ring a user's open sockets when what let them open may have ended (issue 21 item 6).

The ring (``runs.engine.doorbell.ring_user``) says only "check again": the socket reads its
credential and the user's roles from the database and closes if they no longer hold
(runs/web/socket_guard.py). So ringing too often costs a check, never a wrong close, and every ring
goes out after commit: a socket that checks at once sees what the ring announces. Rung when:

- a token is deleted: ``DELETE /api/auth/token/``, a password change (agentconsole/access/auth.py),
  the admin, an expired token deleted on sight;
- a user's password, active flag or superuser flag is saved, or the user is deleted;
- a user leaves a group (roles are groups, agentconsole/kernel/roles.py), from either side of the
  relation, or a group is renamed or deleted;
- a database session is deleted: sign-out, a session key cycled (a password change by the user
  themselves), ``clearsessions``. Sessions in a store without rows (cache, signed cookies) are
  not rung: the periodic check finds those.

Connected in agentconsole/apps.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import SESSION_KEY, get_user_model
from django.contrib.auth.models import Group
from django.contrib.sessions.models import Session
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete
from rest_framework.authtoken.models import Token

from runs.engine.doorbell import ring_user

# Saving only these fields (``update_fields``) cannot end a socket's right: no ring.
_CHANGES_ACCESS = {"password", "is_active", "is_superuser"}


def _ring_after_commit(user_ids: Iterable[Any]) -> None:
    ids = sorted({i for i in user_ids if i is not None}, key=str)

    def ring() -> None:
        for user_id in ids:
            ring_user(user_id)

    if ids:
        transaction.on_commit(ring)


def on_token_deleted(sender: Any, instance: Any, **kw: Any) -> None:
    _ring_after_commit([instance.user_id])


def on_user_saved(
    sender: Any, instance: Any, created: bool, update_fields: Any = None, **kw: Any
) -> None:
    # Sign-in saves last_login alone: that changes nothing a socket depends on.
    if created or (update_fields is not None and not _CHANGES_ACCESS & set(update_fields)):
        return
    _ring_after_commit([instance.pk])


def on_user_deleted(sender: Any, instance: Any, **kw: Any) -> None:
    _ring_after_commit([instance.pk])


def on_groups_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: Any, **kw: Any
) -> None:
    """``user.groups.remove(g)`` (forward) or ``group.user_set.remove(u)`` (reverse). Joining
    a group only adds rights: no ring."""
    if not reverse:
        if action in ("post_remove", "post_clear"):
            _ring_after_commit([instance.pk])
        return
    if action == "pre_clear":  # the members are gone by post_clear
        instance._ws_members = _members(instance)
    elif action == "post_clear":
        _ring_after_commit(getattr(instance, "_ws_members", ()))
    elif action == "post_remove":
        _ring_after_commit(pk_set or ())


def on_group_changed(sender: Any, instance: Any, created: bool = False, **kw: Any) -> None:
    """A renamed group may no longer be a role; a deleted one is not (pre_delete: the members
    are still there to be read)."""
    if not created:
        _ring_after_commit(_members(instance))


def on_session_deleted(sender: Any, instance: Any, **kw: Any) -> None:
    user_id = instance.get_decoded().get(SESSION_KEY)  # {} when it cannot be decoded
    if user_id is not None:
        _ring_after_commit([get_user_model()._meta.pk.to_python(user_id)])


def _members(group: Any) -> list[Any]:
    return list(get_user_model()._default_manager.filter(groups=group).values_list("pk", flat=True))


def connect() -> None:
    user = get_user_model()
    post_delete.connect(on_token_deleted, sender=Token, dispatch_uid="ws-revoke-token")
    post_save.connect(on_user_saved, sender=user, dispatch_uid="ws-revoke-user")
    post_delete.connect(on_user_deleted, sender=user, dispatch_uid="ws-revoke-user-deleted")
    m2m_changed.connect(
        on_groups_changed, sender=user.groups.through, dispatch_uid="ws-revoke-groups"
    )
    post_save.connect(on_group_changed, sender=Group, dispatch_uid="ws-revoke-group")
    pre_delete.connect(on_group_changed, sender=Group, dispatch_uid="ws-revoke-group-deleted")
    post_delete.connect(on_session_deleted, sender=Session, dispatch_uid="ws-revoke-session")
