"""The named personas of the test suite and what each may do (agentconsole/kernel/roles.py,
runs/apis.py, memory/apis.py; roles are groups created by policy/migrations/0002_roles.py):

- ``anonymous``: no credentials. Only the schema, the docs and the token endpoint answer; every
  other route is NOT_AUTHENTICATED.
- ``alice`` (group ``user``): a user who owns runs. Starts runs for herself only (no grants, no
  other subject); sees, cancels and decides the confirmations of her own runs; reads and edits
  her own memory. No handoffs, no queue counts.
- ``bob`` (group ``user``): the outsider. Same rights as alice on his own runs and memory;
  alice's runs and confirmations are NOT_FOUND to him (existence not disclosed), her memory is
  MEMORY_SCOPE_NOT_OWNED.
- ``operator`` (group ``operator``): reads every run and the queue counts, decides every
  confirmation, cancels any run, grants capabilities to the runs it starts; reads handoffs, but
  does not claim or resolve them; no other subject's memory.
- ``operator2`` (group ``operator``): a second operator, the other pair of eyes of a four-eyes
  confirmation (policy.domain.confirmation.approvers); otherwise the same rights as ``operator``.
- ``reviewer`` and ``reviewer2`` (group ``reviewer``): read every run; claim and resolve
  handoffs (a handoff claimed by one is PERMISSION_DENIED to the other); do not decide
  confirmations, cancel others' runs or grant; no other subject's memory.
- ``admin`` (group ``admin``): everything, including another subject's memory (``?subject=``)
  and starting runs for another subject.
- ``root`` (a superuser in no group): the same as ``admin``.

``People`` makes API personas (a user, a token, a client) on first use; ``make_user`` makes
just the user row, for tests below the API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

PASSWORD = "api-tests-only-password"
ROLES = ("operator", "reviewer", "user", "admin")


@dataclass
class Persona:
    """One caller: a user (None for the anonymous client), its API token and a client that sends
    ``Authorization: Token ...`` on every request (scripts' auth; CSRF does not apply)."""

    name: str
    user: Any
    token: str | None
    client: APIClient = field(repr=False)

    @property
    def username(self) -> str:
        return self.user.get_username() if self.user is not None else ""

    def get(self, path: str, data: Any = None, **extra: Any) -> Any:
        return self.client.get(path, data, **extra)

    def post(self, path: str, data: Any = None, **extra: Any) -> Any:
        """POST ``data`` as JSON (``None``: an empty JSON object)."""
        return self.client.post(path, {} if data is None else data, format="json", **extra)

    def post_raw(self, path: str, body: bytes | str, content_type: str) -> Any:
        return self.client.post(path, data=body, content_type=content_type)


def ensure_roles() -> dict[str, Group]:
    """The role groups come from policy/migrations/0002_roles.py; a flush by an earlier
    transactional test empties the table, so they are re-created here when missing."""
    return {name: Group.objects.get_or_create(name=name)[0] for name in ROLES}


def make_persona(
    name: str, *, roles: tuple[str, ...] = (), superuser: bool = False, token: bool = True
) -> Persona:
    groups = ensure_roles()
    User = get_user_model()
    if superuser:
        user = User.objects.create_superuser(name, f"{name}@example.test", PASSWORD)
    else:
        user = User.objects.create_user(name, f"{name}@example.test", PASSWORD)
    for role in roles:
        user.groups.add(groups[role])
    client = APIClient()
    key = None
    if token:
        key = Token.objects.create(user=user).key
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return Persona(name=name, user=user, token=key, client=client)


def anonymous() -> Persona:
    return Persona(name="anonymous", user=None, token=None, client=APIClient())


class People:
    """The personas, each created on first use (a test pays only for the users it needs)."""

    ROLES: dict[str, tuple[str, ...]] = {
        "alice": ("user",),
        "bob": ("user",),
        "operator": ("operator",),
        "operator2": ("operator",),
        "reviewer": ("reviewer",),
        "reviewer2": ("reviewer",),
        "admin": ("admin",),
    }

    def __init__(self) -> None:
        self.anonymous = anonymous()

    def __getattr__(self, name: str) -> Persona:
        if name == "root":
            made = make_persona("root", superuser=True)
        elif name in self.ROLES:
            made = make_persona(name, roles=self.ROLES[name])
        else:
            raise AttributeError(name)
        setattr(self, name, made)
        return made


def persona(people: People, name: str) -> Persona:
    return getattr(people, name)


def make_user(name: str, *roles: str, password: str | None = None, superuser: bool = False) -> Any:
    """A user row in the given role groups; no password (unusable) unless one is given: hashing
    one costs a third of a second. The groups come from a migration, but a transactional test
    before this one may have flushed them, hence ``ensure_roles``."""
    groups = ensure_roles()
    users = get_user_model().objects
    if superuser:
        user = users.create_superuser(username=name, password=password)
    else:
        user = users.create_user(username=name, password=password)
    for role in roles:
        user.groups.add(groups[role])
    return user


def user_fixture(name: str, *roles: str) -> Any:
    """A pytest fixture named ``name`` that makes that user: ``alice = user_fixture("alice",
    "user")`` in a test module, one line per persona."""
    return pytest.fixture(name=name)(lambda: make_user(name, *roles))
