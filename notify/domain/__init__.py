"""Notification rules, plain Python: events, who they concern, targets, signatures, back-off."""
