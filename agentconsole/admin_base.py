"""Read-only admin: the admin shows runtime records, it never changes them.

Nobody sets a run status, a ledger outcome or a confirmation decision by hand (seed §14); those
change only through services and the state machine.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
