"""python manage.py grant_role USERNAME ROLE [ROLE ...] — give an account its roles.

    grant_role ana operator                      ana may decide confirmations
    grant_role ana user --create                 make the account (password set later)
    grant_role ana user --create --password-stdin   …with the password read from standard input
    grant_role ana admin --revoke                take a role away

Roles: operator, reviewer, user, admin (admin also makes a Django superuser). Safe to run again:
what is already so is reported and left alone, an existing account's password is never changed.
Errors name a stable code first (``ROLE_UNKNOWN: …``) and exit with status 1.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentconsole.access.accounts import ROLES, AccountError, RoleChange, role_grant, role_revoke


class Command(BaseCommand):
    help = "Give an account roles (operator, reviewer, user, admin); --create makes the account."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("roles", nargs="+", metavar="role", help=", ".join(ROLES))
        parser.add_argument("--create", action="store_true", help="make the account if missing")
        parser.add_argument(
            "--password-stdin",
            action="store_true",
            help="with --create: the new account's password is the first line of standard input",
        )
        parser.add_argument("--revoke", action="store_true", help="take the roles away instead")

    def handle(self, *args: Any, **options: Any) -> None:
        username, roles = options["username"], options["roles"]
        if options["password_stdin"] and not options["create"]:
            raise CommandError("OPTION_INVALID: --password-stdin goes with --create")
        if options["revoke"] and options["create"]:
            raise CommandError("OPTION_INVALID: --revoke and --create do not go together")
        try:
            if options["revoke"]:
                change = role_revoke(username=username, roles=roles)
            else:
                password = _stdin_password() if options["password_stdin"] else None
                change = role_grant(
                    username=username, roles=roles, create=options["create"], password=password
                )
        except AccountError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        self.stdout.write(_said(change, revoked=options["revoke"]))
        if change.created and not options["password_stdin"]:
            self.stdout.write(
                f"{username} cannot sign in until a password is set: "
                f"manage.py changepassword {username} (or the Django admin's Users page)"
            )


def _stdin_password() -> str:
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        raise CommandError("PASSWORD_INVALID: --password-stdin read an empty line")
    return line


def _said(change: RoleChange, *, revoked: bool) -> str:
    parts = []
    if change.created:
        parts.append("account created")
    if change.changed:
        parts.append(f"{'revoked' if revoked else 'granted'}: {', '.join(change.changed)}")
    if change.unchanged:
        parts.append(
            f"{'did not have' if revoked else 'already had'}: {', '.join(change.unchanged)}"
        )
    return f"{change.username}: {'; '.join(parts)}"
