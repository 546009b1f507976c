"""What a person does to a run besides approving or declining one proposal.

Edit a waiting proposal or answer the planner with a note (answers), decide identical proposals
in several runs together (batch), claim and resolve a handoff (handoffs, handoff_selectors). What
belongs here: services and selectors of a person's answers; each write still goes through
``runs.services`` or the state machine.
"""
