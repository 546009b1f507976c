"""Where an argument's value came from, and what follows from it.

Value-level provenance (provenance), the text forms, matcher and index of what a run read
(taint), policy by argument (argument_policy), and provenance as the person deciding reads it
(provenance_shown). What belongs here: computing and judging origins, never trusting a planner's.
"""
