"""Read-only admin: the admin shows runtime records, it never changes them.

Nobody sets a run status, a ledger outcome or a confirmation decision by hand (seed §14); those
change only through services and the state machine. What the admin masks in a proposal's
arguments is policy's (policy/admin_masking.py).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from policy.domain.canonical import pretty_json


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


def pretty(value: Any) -> str:
    return pretty_json(value)
