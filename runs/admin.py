from typing import Any

from django.contrib import admin

from agentconsole import wiring
from agentconsole.kernel.admin_base import ReadOnlyAdmin, pretty
from policy.admin_masking import masked_arguments, masked_proposal
from runs import models as m

# Every page shows stored content only (secrets were redacted before storage) and never a field
# a tool contract marks as redacted (the trace never shows those): raw proposal arguments are
# excluded and shown masked instead (issue 9 item 12).


def _planner_shown(planner: Any) -> str:
    """A stored planner (a run's or a profile's), its scripted proposals masked."""
    if isinstance(planner, dict) and isinstance(planner.get("outputs"), list):
        registry = wiring.registry()
        outputs = [masked_proposal(o, registry=registry) for o in planner["outputs"]]
        planner = {**planner, "outputs": outputs}
    return pretty(planner)


@admin.register(m.Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "subject", "status", "step", "tool_calls", "stop_reason", "created_at")
    list_filter = ("status",)
    search_fields = ("id", "subject")
    exclude = ("pending_proposal", "planner")
    readonly_fields = ("pending_proposal_shown", "planner_shown")

    @admin.display(description="pending proposal")
    def pending_proposal_shown(self, obj: m.Run) -> str:
        return pretty(masked_proposal(obj.pending_proposal, registry=wiring.registry()))

    @admin.display(description="planner")
    def planner_shown(self, obj: m.Run) -> str:
        return _planner_shown(obj.planner)


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
    exclude = ("arguments",)
    readonly_fields = ("arguments_shown",)

    @admin.display(description="arguments")
    def arguments_shown(self, obj: m.LedgerEntry) -> str:
        return pretty(
            masked_arguments(
                obj.tool_name, obj.tool_version, obj.arguments, registry=wiring.registry()
            )
        )


@admin.register(m.Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ("run", "path", "sha256", "size")


@admin.register(m.Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ("corpus", "slug", "title", "loaded_at")
    list_filter = ("corpus",)
    search_fields = ("slug", "title")


@admin.register(m.RunProfile)
class RunProfileAdmin(ReadOnlyAdmin):
    """Read-only: profiles are written on the console's /profiles/ pages, checked by the domain."""

    list_display = ("name", "audience", "version", "archived_at", "updated_at")
    exclude = ("planner",)
    readonly_fields = ("planner_shown",)

    @admin.display(description="planner")
    def planner_shown(self, obj: m.RunProfile) -> str:
        return _planner_shown(obj.planner)
