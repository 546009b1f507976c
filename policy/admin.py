from django.contrib import admin

from agentconsole.admin_base import ReadOnlyAdmin
from policy import models as m


@admin.register(m.Grant)
class GrantAdmin(ReadOnlyAdmin):
    list_display = ("id", "capability", "resource_scope", "expires_at_step", "calls_used")


@admin.register(m.Confirmation)
class ConfirmationAdmin(ReadOnlyAdmin):
    list_display = ("id", "tool_name", "status", "proposal_hash", "requested_at", "decided_by")
    list_filter = ("status",)
