from django.contrib import admin

from agentconsole import wiring
from agentconsole.kernel.admin_base import ReadOnlyAdmin, pretty
from policy import models as m
from policy.admin_masking import masked_proposal


@admin.register(m.Grant)
class GrantAdmin(ReadOnlyAdmin):
    list_display = ("id", "capability", "resource_scope", "expires_at_step", "calls_used")


@admin.register(m.Confirmation)
class ConfirmationAdmin(ReadOnlyAdmin):
    list_display = (
        "id", "tool_name", "status", "approvers", "proposal_hash", "requested_at", "decided_by",
    )  # fmt: skip
    list_filter = ("status", "approvers")
    # The fields a tool contract marks as redacted are masked, as in the trace (issue 9 item 12).
    exclude = ("proposal",)
    readonly_fields = ("proposal_shown",)

    @admin.display(description="proposal")
    def proposal_shown(self, obj: m.Confirmation) -> str:
        return pretty(masked_proposal(obj.proposal, registry=wiring.registry()))


@admin.register(m.ConfirmationApproval)
class ConfirmationApprovalAdmin(ReadOnlyAdmin):
    # Every approver of every confirmation (the audit of four eyes), never edited by hand.
    list_display = ("confirmation", "username", "independent", "approved_at")
