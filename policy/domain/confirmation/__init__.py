"""A person's confirmation of a proposal.

Evidence bound to the exact proposal hash (confirmations), who may decide it (approvers), an edit
of its arguments (edits) and the JSON-path diff a person reads (json_diff). What belongs here: the
rules of a person's answer; the gate that asks for it is ``policy.domain.gate``.
"""
