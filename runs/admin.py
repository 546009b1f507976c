from django.contrib import admin

from agentconsole.admin_base import ReadOnlyAdmin
from runs import models as m


@admin.register(m.Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "subject", "status", "step", "tool_calls", "stop_reason", "created_at")
    list_filter = ("status",)
    search_fields = ("id", "subject")


@admin.register(m.TraceEvent)
class TraceEventAdmin(ReadOnlyAdmin):
    list_display = ("run", "sequence", "event", "proposal_id", "created_at")
    list_filter = ("event",)
    search_fields = ("run__id",)


@admin.register(m.Observation)
class ObservationAdmin(ReadOnlyAdmin):
    list_display = ("run", "observation_id", "kind", "trust", "citable")
    list_filter = ("trust", "kind")


@admin.register(m.LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("run", "tool_name", "tool_version", "status", "attempt", "idempotency_token")
    list_filter = ("status", "tool_name")


@admin.register(m.Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ("run", "path", "sha256", "size")


@admin.register(m.Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ("corpus", "slug", "title", "loaded_at")
    list_filter = ("corpus",)
    search_fields = ("slug", "title")
