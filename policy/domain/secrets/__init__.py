"""Secrets never reach a proposal, observation, trace event, log line or frame.

The scrubber and scanner (redaction) and the token shapes the scanner knows (secret_rules). What
belongs here: finding and replacing secret values.
"""
