"""Runs domain core: state machine, budgets, loop guard, step decisions. No Django here."""
