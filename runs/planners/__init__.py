"""Planners that talk to something outside the process (the model planner)."""
