"""What the console shows of a run, computed from its trace and state.

The run page's timeline (timeline) and what it says to do next (next_steps). What belongs here:
pure summaries for people to read; no rule a run obeys.
"""
