from django.contrib import admin

from agentconsole.kernel.admin_base import ReadOnlyAdmin
from memory import models as m


@admin.register(m.PreferenceRecord)
class PreferenceRecordAdmin(ReadOnlyAdmin):
    list_display = ("subject", "key", "value", "version", "expires_at", "revoked_at")
    search_fields = ("subject", "key")


@admin.register(m.PreferenceHistory)
class PreferenceHistoryAdmin(ReadOnlyAdmin):
    list_display = ("subject", "key", "version", "action", "created_at")
