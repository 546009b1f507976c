"""A planner step and a tool call's return, as pure functions that return a commit.

A planner step decided (decide, with the loop guard and the final-answer check), a tool call
settled (settle), a person's edit or answer (edits), and the ``Commit`` every step function builds
(commits). What belongs here: the step's decisions; the loop around them is ``runs.domain.runner``
and the rest of a run's life (start, cancel, deadlines) ``runs.domain.lifecycle``.
"""
