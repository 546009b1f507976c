"""The demo accounts ``load_demo`` creates, each with its user name as password: one list, read
by the command that creates them and by the deploy check that refuses them
(``agentconsole.checks``), so an account added here is both made and checked."""

from __future__ import annotations

DEMO_USERS = (
    # (username, role, what they may do)
    ("operator", "operator", "approves or declines pending confirmations"),
    ("reviewer", "reviewer", "claims and resolves handoffs"),
    ("alice", "user", "starts runs, owns her runs and preferences"),
    ("bob", "user", "another user: sees his own runs, never alice's"),
    ("admin", "admin", "everything, and the Django admin"),
)
